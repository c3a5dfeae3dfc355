"""`compactor verify` re-reads each merge commit by time travel and checks it against the
certificate it committed: all hold after real merges, and a merged file replaced under its own
name afterwards is found."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.domain.plans import Commit, make_plan
from compactor.domain.segments import Segment
from tests.delta.test_driver_merge import load, merged_file

pytestmark = pytest.mark.integration


@pytest.fixture
def uncompressed(spark: Any) -> Iterator[None]:
    """Loads written without compression, so that the driver's merge keeps it and a test can
    change one value of a merged file in place (its size, which the log records, unchanged)."""
    key = "spark.sql.parquet.compression.codec"
    before = spark.conf.get(key)
    spark.conf.set(key, "uncompressed")
    yield
    spark.conf.set(key, before)


def verify(warehouse: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["verify", *args, "--warehouse", str(warehouse)])


def merged(spark: Any, warehouse: Path) -> tuple[Commit, Commit]:
    segments: list[Segment] = [load(spark, warehouse, "t", day) for day in range(5)]
    in_driver = execute_merge(spark, warehouse, make_plan("t", "minor", segments[:3]))
    by_spark = execute_merge(
        spark, warehouse, make_plan("t", "minor", segments[3:]), MergeSettings(driver_max_bytes=0)
    )
    return in_driver, by_spark


def test_every_merge_holds_and_a_file_replaced_under_its_name_is_found(
    spark: Any, warehouse: Path, uncompressed: None
) -> None:
    in_driver, by_spark = merged(spark, warehouse)
    result = verify(warehouse, "t")
    assert result.exit_code == 0, result.output
    assert result.output == "t: 2 rewrite commit(s) from version 0: 2 hold, 0 broken, 0 not checkable\n"
    document = json.loads(verify(warehouse, "t", "--json").output)
    assert [(m["version"], m["verdict"]) for m in document["merges"]] == [
        (in_driver.version, "holds"),
        (by_spark.version, "holds"),
    ]
    assert [m["inputs"]["rows"] for m in document["merges"]] == [90, 60]
    assert all(m["inputs"] == m["output"] for m in document["merges"])

    _, path = merged_file(spark, warehouse, "t", in_driver)
    data = Path(path).read_bytes()
    value, planted = (1005).to_bytes(8, "little", signed=True), (1_000_005).to_bytes(8, "little", signed=True)
    assert data.count(value) == 1, "day 1's row 5 has k = 1005, once in the file's dictionary"
    Path(path).write_bytes(data.replace(value, planted))

    result = verify(warehouse, "t")
    assert result.exit_code == 1, result.output
    first, summary = result.output.splitlines()
    certified = document["merges"][0]["output"]
    assert first.startswith(
        f"t version {in_driver.version} (plan {in_driver_plan(document)}, minor): broken: "
    )
    assert "its output reads 90 rows, " in first and f"now, certified 90 rows, {certified['digest']}" in first
    assert "its inputs" not in first, "the inputs, read at the version before, are as certified"
    assert summary == "t: 2 rewrite commit(s) from version 0: 1 hold, 1 broken, 0 not checkable"

    later = verify(warehouse, "t", "--since", str(in_driver.version + 1))
    assert later.exit_code == 0 and later.output.endswith("1 hold, 0 broken, 0 not checkable\n")


def in_driver_plan(document: dict[str, Any]) -> str:
    return str(document["merges"][0]["plan_id"])


def test_a_missing_table_fails_in_one_line(spark: Any, warehouse: Path) -> None:
    result = verify(warehouse, "nope")
    assert result.exit_code == 2
    assert result.output == f"error: no table 'nope' in {warehouse}\n"

"""Liquid-clustered tables are refused, with why, where an operator first looks: `compactor
config validate --warehouse` and the store's refusal the job checks before a table's first merge
(real Spark and Delta). A segment is a partition; Delta forbids partitioning a clustered table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.delta.spark_store import SparkTableStore
from tests.delta.test_direct_commit import rust_load

pytestmark = pytest.mark.integration


def test_a_clustered_table_is_refused_at_validate_and_by_the_store(
    spark: Any, warehouse: Path, tmp_path: Path
) -> None:
    rust_load(warehouse, "s0", 0, table="plain")
    spark.sql(
        f"CREATE TABLE delta.`{warehouse / 'clustered'}` (k BIGINT, v DOUBLE, segment_id STRING) "
        "USING delta CLUSTER BY (k)"
    )
    store = SparkTableStore(spark, str(warehouse))
    assert store.refusal("plain") is None
    why = store.refusal("clustered")
    assert why is not None and why.startswith("clustering (liquid clustering)")

    config = tmp_path / "tables.yaml"
    config.write_text("defaults:\n  rules:\n    - rule: minor\n")
    result = CliRunner().invoke(main, ["config", "validate", str(config), "--warehouse", str(warehouse)])
    assert result.exit_code != 0
    lines = result.output.splitlines()
    assert lines[0].startswith("table clustered: not compacted: clustering (liquid clustering)")
    assert lines[-1].startswith("error: 1 table(s) in ") and "OPTIMIZE" in lines[-1]

    config.write_text(config.read_text() + "tables:\n  clustered:\n    merge_enabled: false\n")
    result = CliRunner().invoke(main, ["config", "validate", str(config), "--warehouse", str(warehouse)])
    assert result.exit_code == 0, result.output

"""Delta's file actions made in bulk (`compactor/delta/commit/action_seq.py`) are the ones Delta
makes one at a time: each `add` as `Action.fromJson` parses it, each `remove` as
`AddFile.removeWithTimestamp` makes it, for the adds of real tables with deletion vectors, row
tracking, statistics and tags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactor.delta.commit.action_seq import action_seq, removal
from compactor.delta.files import jvm_class, scala_items

pytestmark = pytest.mark.integration


def logged_adds(table: Path) -> list[dict[str, Any]]:
    """Every `add` the table's JSON commits hold."""
    adds = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        adds += [a["add"] for a in map(json.loads, commit.read_text().splitlines()) if "add" in a]
    return adds


def table_adds(spark: Any, root: Path) -> list[dict[str, Any]]:
    """The adds of three real tables: plain and partitioned, with deletion vectors after a
    DELETE, with row tracking; and one add given tags, as a writer may."""
    adds = []
    for name, properties, delete in (
        ("plain", "", False),
        ("vectors", "'delta.enableDeletionVectors' = 'true'", True),
        ("tracked", "'delta.enableRowTracking' = 'true'", False),
    ):
        location = root / name
        spark.sql(
            f"CREATE TABLE delta.`{location}` (k BIGINT, v STRING, segment_id STRING) USING delta "
            f"PARTITIONED BY (segment_id) {f'TBLPROPERTIES ({properties})' if properties else ''}"
        )
        for segment in ("s1", "s2"):
            spark.range(10).selectExpr(
                "id AS k", "cast(id AS string) AS v", f"'{segment}' AS segment_id"
            ).write.format("delta").mode("append").save(str(location))
        if delete:
            spark.sql(f"DELETE FROM delta.`{location}` WHERE k % 3 = 0")
        adds += logged_adds(location)
    return [*adds, {**adds[0], "tags": {"INSERTION_TIME": "1700000000000000", "origin": "loader"}}]


def as_logged(jvm: Any, seq: Any) -> list[dict[str, Any]]:
    return [json.loads(action.json()) for action in scala_items(jvm, seq)]


def test_bulk_actions_are_the_ones_delta_makes_one_at_a_time(spark: Any, tmp_path: Path) -> None:
    jvm = spark._jvm
    adds = table_adds(spark, tmp_path)
    for field in ("deletionVector", "baseRowId", "defaultRowCommitVersion", "stats", "tags"):
        assert any(field in add for add in adds), f"no add with {field}: the comparison would not cover it"
    parse = jvm_class(jvm, "org.apache.spark.sql.delta.actions.Action").fromJson
    one_by_one = [parse(json.dumps({"add": add})) for add in adds]

    assert as_logged(jvm, action_seq(jvm, "add", adds)) == [json.loads(a.json()) for a in one_by_one]
    for data_change in (True, False):
        removals = [removal(add, 1_700_000_000_000, data_change) for add in adds]
        expected = [
            json.loads(a.removeWithTimestamp(1_700_000_000_000, data_change).json()) for a in one_by_one
        ]
        assert as_logged(jvm, action_seq(jvm, "remove", removals)) == expected
    assert as_logged(jvm, action_seq(jvm, "add", [])) == []


def test_an_unknown_kind_of_action_is_refused_by_name(spark: Any) -> None:
    with pytest.raises(KeyError, match="metaData"):
        action_seq(spark._jvm, "metaData", [{}])

"""Row tracking through every rewrite, on real Spark and Delta: each row keeps its stable row id and
row commit version (`_metadata.row_id`, `_metadata.row_commit_version`) through merges on both
write paths, promotions, upsert compaction (the winner's), refreshes and purges; new files carry
the `baseRowId` and `defaultRowCommitVersion` Delta's commit assigns, above the high-water mark
it raises, and a read by row commit version sees no change from a merge."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.config.layout import UpsertConfig
from compactor.config.loading import load_config
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.rewrite.purge import purge_deleted_rows
from compactor.delta.rewrite.refresh import execute_refresh
from compactor.delta.rewrite.upsert import latest_rows
from compactor.domain.plans import Commit, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import UnsupportedTableFeature

pytestmark = pytest.mark.integration

HOUR = datetime(2024, 5, 1, tzinfo=UTC)
PATHS = pytest.mark.parametrize("driver_max_bytes", [0, 16 << 20], ids=["spark", "driver"])
Ids = dict[int, tuple[int, int]]  # k -> (row id, row commit version)


def tracked_table(spark: Any, warehouse: Path, table: str = "t", properties: str = "") -> str:
    path = table_uri(warehouse, table)
    spark.sql(
        f"CREATE TABLE delta.`{path}` (ts TIMESTAMP, k BIGINT, v DOUBLE, segment_id STRING) USING delta "
        f"PARTITIONED BY (segment_id) TBLPROPERTIES ('delta.enableRowTracking' = 'true'{properties})"
    )
    return path


def append(spark: Any, warehouse: Path, segment: Segment, rows: Any) -> Segment:
    """A load: one append of the segment's rows, with its load record."""
    segment = replace(segment, records=rows.count())
    (
        rows.withColumn("segment_id", F.lit(segment.id))
        .write.format("delta")
        .mode("append")
        .option("userMetadata", commit_metadata("load", [segment]))
        .save(table_uri(warehouse, segment.table))
    )
    return segment


def load(spark: Any, warehouse: Path, n: int, rows: int = 20, table: str = "t", v: float = 0.0) -> Segment:
    """Segment `s<n>` of keys n*1000.. in two files: row ids depend on each row's place in its file."""
    start = HOUR + timedelta(hours=n)
    segment = Segment(f"s{n}", table, TimeRange(start, start + timedelta(hours=1)), loaded_at=start)
    data = (
        spark.range(rows)
        .select(
            F.timestamp_seconds(F.lit(int(start.timestamp())) + F.col("id") * 7).alias("ts"),
            (F.col("id") + n * 1000).alias("k"),
            (F.col("id") * 0.5 + v).alias("v"),
        )
        .repartition(2, "k")
    )
    return append(spark, warehouse, segment, data)


def ids(spark: Any, path: str) -> Ids:
    rows = (
        spark.read.format("delta")
        .load(path)
        .select("k", "_metadata.row_id", "_metadata.row_commit_version")
        .collect()
    )
    found = {int(r.k): (int(r.row_id), int(r.row_commit_version)) for r in rows}
    assert len(found) == len(rows), "one row per key"
    return found


def actions(path: str, version: int) -> list[dict[str, Any]]:
    text = Path(path, "_delta_log", f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def high_water_mark(spark: Any, path: str) -> int:
    jvm = spark._jvm
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).update(
        False, jvm.scala.Option.empty(), jvm.scala.Option.empty()
    )
    marks = [
        json.loads(d.json())["domainMetadata"]
        for d in jvm.scala.jdk.javaapi.CollectionConverters.asJava(snapshot.domainMetadata())
    ]
    (mark,) = [m for m in marks if m["domain"] == "delta.rowTracking"]
    return int(json.loads(mark["configuration"])["rowIdHighWaterMark"])


def assert_fresh_rows_committed(spark: Any, path: str, commit: Commit, mark_before: int) -> None:
    """The commit's new files: base row ids above the mark it had, its own version as their
    default, the mark raised past them, and the commit tagged as preserving row tracking."""
    done = actions(path, commit.version)
    added = [a["add"] for a in done if "add" in a]
    assert added and all(a["defaultRowCommitVersion"] == commit.version for a in added)
    assert min(a["baseRowId"] for a in added) == mark_before + 1
    top = max(a["baseRowId"] + json.loads(a["stats"])["numRecords"] - 1 for a in added)
    assert high_water_mark(spark, path) == top
    (info,) = [a["commitInfo"] for a in done if "commitInfo" in a]
    assert info["tags"]["delta.rowTracking.preserved"] == "true"


def written_by(path: str, add: dict[str, Any]) -> str:
    return str(pq.ParquetFile(Path(path, add["path"])).metadata.created_by)


@PATHS
def test_a_cascade_of_merges_keeps_every_rows_id_and_commit_version(
    spark: Any, warehouse: Path, driver_max_bytes: int
) -> None:
    path = tracked_table(spark, warehouse)
    segments = [load(spark, warehouse, n) for n in range(4)]
    settings = MergeSettings(driver_max_bytes=driver_max_bytes, promote_min_bytes=None)
    expected = ids(spark, path)
    assert len({i for i, _ in expected.values()}) == 80

    merges = [make_plan("t", "minor", segments[:2]), make_plan("t", "minor", segments[2:])]
    outputs = []
    for plan in merges:
        mark, version_before = high_water_mark(spark, path), spark_version(spark, path)
        commit = execute_merge(spark, warehouse, plan, settings)
        assert ids(spark, path) == expected
        assert_fresh_rows_committed(spark, path, commit, mark)
        (add,) = [a["add"] for a in actions(path, commit.version) if "add" in a]
        assert ("parquet-cpp-arrow" in written_by(path, add)) == (driver_max_bytes > 0), "the path asked for"
        changed = (
            spark.read.format("delta")
            .load(path)
            .where(F.col("_metadata.row_commit_version") > version_before)
        )
        assert changed.count() == 0, "a read of the rows changed since sees none"
        outputs.append(commit.outputs[0])

    late = load(spark, warehouse, 9)
    expected = ids(spark, path)
    assert len({i for i, _ in expected.values()}) == 100, "a load after merges gets ids of its own"
    final = execute_merge(spark, warehouse, make_plan("t", "minor", [*outputs, late]), settings)
    assert ids(spark, path) == expected, "merged outputs merged again keep them too"
    (add,) = [a["add"] for a in actions(path, final.version) if "add" in a]
    (meta,) = [a["metaData"] for a in actions(path, 0) if "metaData" in a]
    config = meta["configuration"]
    tracking = [config[f"delta.rowTracking.materialized{c}ColumnName"] for c in ("RowId", "RowCommitVersion")]
    columns = pq.read_schema(Path(path, add["path"])).names
    assert columns == ["ts", "k", "v", *tracking, "segment_id"], (
        "stored in the materialised columns, as Spark"
    )


def spark_version(spark: Any, path: str) -> int:
    return int(DeltaTable.forPath(spark, path).history(1).select("version").first().version)


def test_a_promotion_keeps_ids_of_moved_and_rewritten_files_and_a_valid_checksum(
    spark: Any, warehouse: Path
) -> None:
    path = tracked_table(spark, warehouse)
    big, small = load(spark, warehouse, 0, rows=400), load(spark, warehouse, 1, rows=4)
    files = [a["add"] for v in range(3) for a in actions(path, v) if "add" in a]
    big_files = [a for a in files if a["partitionValues"]["segment_id"] == "s0"]
    expected, mark = ids(spark, path), high_water_mark(spark, path)

    plan = make_plan("t", "minor", [big, small])
    commit = execute_merge(
        spark, warehouse, plan, MergeSettings(promote_min_bytes=min(a["size"] for a in big_files))
    )

    assert ids(spark, path) == expected
    added = [a["add"] for a in actions(path, commit.version) if "add" in a]
    moved = [a for a in added if a["path"] in {b["path"] for b in big_files}]
    assert {(a["baseRowId"], a["defaultRowCommitVersion"]) for a in moved} == {
        (a["baseRowId"], a["defaultRowCommitVersion"]) for a in big_files
    }, "a file re-added keeps its base row id and default commit version"
    assert len(added) == len(big_files) + 1 and high_water_mark(spark, path) == mark + 4

    assert checksum_valid(spark, path), "a checksum, if any, holds the raised high-water mark"

    later = load(spark, warehouse, 2)
    after = ids(spark, path)
    assert len({i for i, _ in after.values()}) == 424, "no id given twice after the promotion"
    execute_merge(spark, warehouse, make_plan("t", "minor", [commit.outputs[0], later]))
    assert ids(spark, path) == after and checksum_valid(spark, path)


def checksum_valid(spark: Any, path: str) -> bool:
    """Does the newest version's checksum (if any) agree with the table's state?"""
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the snapshot with the checksum on disk
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).update(
        False, jvm.scala.Option.empty(), jvm.scala.Option.empty()
    )
    return bool(snapshot.validateChecksum(jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({})))


def test_upsert_compaction_keeps_each_winners_id_and_commit_version(spark: Any, warehouse: Path) -> None:
    """Keys 5..19 are in both loads with equal comparison values and no known load times: the row
    hash decides, and it must be the hash readers compute (`latest_rows`), not one over the row
    tracking columns a rewrite carries."""
    path = tracked_table(spark, warehouse)
    old = load(spark, warehouse, 0)
    new_rows = spark.range(5, 25).select(
        F.timestamp_seconds(F.lit(int(HOUR.timestamp())) + F.col("id") * 3).alias("ts"),
        F.col("id").alias("k"),
        (F.col("id") * 0.5).alias("v"),
    )
    new = append(spark, warehouse, Segment("s1", "t", old.range, loaded_at=old.loaded_at), new_rows)
    upsert = UpsertConfig(primary_key=("k",), comparison_column="v")
    table = spark.read.format("delta").load(path)
    tracked = {
        (int(r.k), r.ts): (int(r.row_id), int(r.row_commit_version))
        for r in table.select("k", "ts", "_metadata.row_id", "_metadata.row_commit_version").collect()
    }
    winners = {
        int(r.k): tracked[(int(r.k), r.ts)] for r in latest_rows(spark, warehouse, "t", upsert).collect()
    }
    assert {v for _, v in winners.values()} == {1, 2}, "winners from both loads"

    plan = make_plan("t", "upsert", [old, new])
    commit = execute_merge(spark, warehouse, plan, MergeSettings(upsert=upsert), load_order={})

    after = ids(spark, path)
    assert commit.records_out == 25 and after == winners, "every winner as it was, the losers gone"
    (info,) = [a["commitInfo"] for a in actions(path, commit.version) if "commitInfo" in a]
    assert info["tags"]["delta.rowTracking.preserved"] == "true"


def refresh_settings(version_rule: dict[str, Any]) -> MergeSettings:
    layout = {
        "time_column": "ts",
        "bucket_time_period": "1d",
        "columns": {"ts": {"type": "timestamp"}, "k": {"type": "bigint"}, "v": {"type": "double"}},
    }
    rule = {"rule": "refresh", "trigger": "manual"} | version_rule
    config = load_config({"tables": {"t": {"config_version": 2, "layout": layout, "rules": [rule]}}})
    return MergeSettings.of(config.for_table("t"))


@pytest.mark.parametrize(
    "rule",
    [{}, {"round_bucket_time_period": "1h"}, {"merge_type": "dedup"}],
    ids=["concat", "rounded", "dedup"],
)
def test_a_refresh_keeps_ids_and_gives_updated_rows_its_version(
    spark: Any, warehouse: Path, rule: dict[str, Any]
) -> None:
    path = tracked_table(spark, warehouse)
    segments = [load(spark, warehouse, n) for n in range(2)]
    expected = ids(spark, path)

    commit = execute_refresh(
        spark, warehouse, make_plan("t", "refresh", segments, allow_single=True), refresh_settings(rule)
    )

    after = ids(spark, path)
    assert {k: i for k, (i, _) in after.items()} == {k: i for k, (i, _) in expected.items()}
    versions = {v for _, v in after.values()}
    assert versions == ({commit.version} if "round_bucket_time_period" in rule else {1, 2})
    assert len({i for i, _ in after.values()}) == 40


def test_a_table_wide_refresh_of_a_tracked_table_is_refused_and_commits_nothing(
    spark: Any, warehouse: Path
) -> None:
    path = tracked_table(spark, warehouse)
    segments = [load(spark, warehouse, n) for n in range(2)]
    version = spark_version(spark, path)
    plan = replace(make_plan("t", "refresh", segments, allow_single=True), table_wide=True)
    with pytest.raises(UnsupportedTableFeature, match=r"table-wide refresh.*new row ids"):
        execute_refresh(spark, warehouse, plan, refresh_settings({}))
    assert spark_version(spark, path) == version


def test_a_purge_keeps_the_ids_of_the_rows_it_keeps(spark: Any, warehouse: Path) -> None:
    path = tracked_table(spark, warehouse, properties=", 'delta.enableDeletionVectors' = 'true'")
    segments = [load(spark, warehouse, n) for n in range(2)]
    DeltaTable.forPath(spark, path).delete("k % 3 = 0")
    expected = ids(spark, path)

    purge_deleted_rows(spark, warehouse, segments)

    assert ids(spark, path) == expected
    assert not [
        a for a in actions(path, spark_version(spark, path)) if a.get("add", {}).get("deletionVector")
    ]

"""What the executor reads straight from `_delta_log` agrees with Delta's own snapshot and history."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.client.loader import sample_rows
from compactor.delta.files import HadoopFiles
from compactor.delta.log import reads
from compactor.delta.log.reader import CommitFacts, DeltaLogReader
from compactor.delta.log.reads import segments_with_rows
from compactor.delta.log.rust_reads import file_totals, table_properties
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.spark_store import SparkTableStore
from compactor.delta.table_ops.properties import load_table_config, save_table_config
from compactor.delta.table_ops.writes import write_segment
from compactor.domain.plans import make_plan, output_id, plan_id_for
from compactor.domain.segments import Segment, TimeRange

pytestmark = pytest.mark.integration

DAY = datetime(2024, 3, 1, tzinfo=UTC)


def load(spark: Any, warehouse: Path, sid: str, day: int, rows: int = 20) -> Segment:
    start = DAY + timedelta(days=day)
    segment = Segment(sid, "t", TimeRange(start, start + timedelta(days=1)), loaded_at=start)
    return write_segment(
        spark, warehouse, segment, sample_rows(spark, start, start + timedelta(days=1), rows)
    )


def reader(spark: Any, warehouse: Path) -> DeltaLogReader:
    return DeltaLogReader(HadoopFiles(spark), table_uri(warehouse, "t"), "t")


def test_segments_with_rows_agrees_with_the_snapshot_through_adds_removes_and_old_commits(
    spark: Any, warehouse: Path
) -> None:
    a, b, _ = (
        load(spark, warehouse, sid, i) for i, sid in enumerate(["a:1", "b", "c"])
    )  # ':' is escaped in paths
    assert (a.records, b.records) == (20, 20)
    ids = ["a:1", "b", "c", "ghost"]
    log = reader(spark, warehouse)
    assert segments_with_rows(spark, log, ids) == {"a:1", "b", "c"}

    plan = make_plan("t", "test", [a, b])
    execute_merge(spark, warehouse, plan)  # removes a and b, adds the output
    output = plan.output.id
    expected = {"c", output}
    assert segments_with_rows(spark, log, [*ids, output]) == expected
    # depth 0 skips the commit files entirely: the snapshot lookup alone must agree
    assert segments_with_rows(spark, log, [*ids, output], depth=0) == expected
    # depth 1 sees only the merge commit: c (loaded earlier) comes from the snapshot lookup
    assert segments_with_rows(spark, log, ["c", output, "a:1"], depth=1) == {"c", output}
    snapshot = {r.segment_id for r in DeltaTable.forPath(spark, table_uri(warehouse, "t")).toDF().collect()}
    assert snapshot == expected


def test_commit_lookup_matches_delta_history_and_a_replayed_plan_is_not_written_twice(
    spark: Any, warehouse: Path
) -> None:
    a, b = load(spark, warehouse, "a", 0), load(spark, warehouse, "b", 1)
    plan = make_plan("t", "test", [a, b])
    began = time.time()
    first = execute_merge(spark, warehouse, plan)
    ended = time.time()
    path = table_uri(warehouse, "t")
    history = DeltaTable.forPath(spark, path).history(1).collect()[0]
    assert (first.version, first.records_out) == (history.version, 40)
    assert first.bytes_out == int(history.operationMetrics["numOutputBytes"]) > 0
    assert not first.already_done

    again = execute_merge(spark, warehouse, plan)
    assert again.already_done and again.version == first.version
    assert again.outputs == first.outputs and again.outputs[0].records == 40
    log = reader(spark, warehouse)
    found = log.find(f'"plan_id":"{plan.plan_id}"')
    assert found == CommitFacts(
        first.version, 40, first.bytes_out, first.outputs, data_change=False, timestamp_ms=found.timestamp_ms
    )  # a plain merge only rearranged rows
    # the commit's timestamp splits the merge: files written before it, the commit after
    assert found.timestamp_ms is not None and began * 1000 <= found.timestamp_ms <= ended * 1000
    assert first.write_ms is not None and first.commit_ms is not None
    assert 0 <= first.write_ms + first.commit_ms <= first.duration_ms + 1
    assert log.find('"plan_id":"no-such-plan"') is None
    assert log.latest_version() == first.version
    assert DeltaTable.forPath(spark, path).history().count() == first.version + 1  # no extra commit


def test_a_plan_committed_beyond_the_recent_commits_is_still_found_with_its_version(
    spark: Any, warehouse: Path
) -> None:
    """The fast path reads the newest `depth` commit files; an older commit of the plan is
    found through the snapshot's SetTransaction and the history, not reported as new."""
    a, b = load(spark, warehouse, "a", 0), load(spark, warehouse, "b", 1)
    plan = make_plan("t", "test", [a, b])
    first = execute_merge(spark, warehouse, plan)
    for day in range(2, 6):  # four newer commits, more than the depth below
        load(spark, warehouse, f"later{day}", day, rows=2)
    path = table_uri(warehouse, "t")
    assert reader(spark, warehouse).find(f'"plan_id":"{plan.plan_id}"', depth=3) is None

    again = execute_merge(spark, warehouse, plan, MergeSettings(depth=3))
    assert again.already_done
    assert (again.version, again.records_out, again.bytes_out) == (first.version, 40, first.bytes_out)
    assert DeltaTable.forPath(spark, path).history().count() == first.version + 5


@pytest.mark.parametrize("commits", [1, 2, 5, 6, 17])
def test_the_latest_version_is_found_without_listing_the_log(
    tmp_path: Path, spark: Any, commits: int
) -> None:
    log_dir = tmp_path / "t" / "_delta_log"
    log_dir.mkdir(parents=True)
    for v in range(commits):
        (log_dir / f"{v:020d}.json").write_text('{"commitInfo":{}}\n')
    log = DeltaLogReader(HadoopFiles(spark), str(tmp_path / "t"), "t")
    assert log.latest_version() == commits - 1
    (log_dir / f"{commits:020d}.json").write_text('{"commitInfo":{}}\n')
    assert log.latest_version() == commits, "a later commit is found from the version last seen"


def test_rows_per_segment_from_delta_rs_agree_with_spark_s_snapshot(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up counts each new table's rows per segment through delta-rs where it can; the
    counts are Spark's, through a merge (removes) and a segment of two files; deletion vectors
    (a reader feature) send the count to Spark."""
    for sid, day, rows in (("a", 0, 20), ("b", 1, 7), ("c", 2, 5)):
        load(spark, warehouse, sid, day, rows)
    b_again = sample_rows(spark, DAY + timedelta(days=1), DAY + timedelta(days=2), 4)
    b_again.withColumn("segment_id", F.lit("b")).write.format("delta").mode("append").save(
        table_uri(warehouse, "t")
    )  # a second file in b
    segments = {s.id: s for s in reads.read_catalog(spark, warehouse, "t").segments("t")}
    execute_merge(spark, warehouse, make_plan("t", "bench", [segments["a"], segments["c"]]))

    counted = reads.segment_rows(spark, warehouse, "t")
    monkeypatch.setattr(HadoopFiles, "local_path", lambda self, uri: None)  # as on an object store
    assert counted == reads.segment_rows(spark, warehouse, "t")
    assert {sid: c.visible for sid, c in counted.items()} == {"b": 11, plan_output("a", "c"): 25}
    monkeypatch.undo()

    uri = table_uri(warehouse, "t")
    assert file_totals(uri, "segment_id") is not None
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    assert file_totals(uri, "segment_id") is None, "a reader feature: Spark counts"
    assert reads.segment_rows(spark, warehouse, "t") == counted


def plan_output(*ids: str) -> str:
    return output_id(plan_id_for("t", "bench", list(ids)))


def test_a_new_table_s_history_is_read_from_its_log_and_from_spark_once_cleanup_began(
    spark: Any, warehouse: Path
) -> None:
    """Start-up reads a table new to the catalog from its commit files (no Spark query); the
    records are Delta history's, and once log cleanup removed the first commit, Spark's
    history (what is left of it) answers instead."""
    first = [load(spark, warehouse, sid, day) for sid, day in (("a", 0), ("b", 1))]
    execute_merge(spark, warehouse, make_plan("t", "bench", first))
    store = SparkTableStore(spark, warehouse)
    from_log, from_spark = store.history("t"), reads.read_commits(spark, warehouse, "t")
    assert [replace(r, committed_at=None) for r in from_log] == [
        replace(r, committed_at=None) for r in from_spark
    ]
    assert [r.op for r in from_log] == ["load", "load", "merge"]
    uri = table_uri(warehouse, "t")
    commits = [Path(uri, "_delta_log", f"{v:020d}.json").read_text() for v in range(3)]
    assert store.kept_commit_bytes() == sum(map(len, commits)), "the commits read stay parsed"

    spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri).checkpoint()
    Path(uri, "_delta_log", f"{0:020d}.json").unlink()  # as log cleanup leaves it
    assert [r.version for r in SparkTableStore(spark, warehouse).history("t")] == [1, 2]


def test_a_recorded_config_reads_the_same_through_delta_rs_and_spark(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(spark, warehouse, "a", 0)
    assert load_table_config(spark, warehouse, "t") is None
    settings = '{"rules": [{"rule": "minor"}], "note": "it\'s \\\\ \\"quoted\\""}'
    save_table_config(spark, warehouse, "t", settings)
    assert table_properties(table_uri(warehouse, "t")) is not None  # delta-rs reads it
    assert load_table_config(spark, warehouse, "t") == settings
    monkeypatch.setattr(HadoopFiles, "local_path", lambda self, uri: None)  # as on an object store
    assert load_table_config(spark, warehouse, "t") == settings

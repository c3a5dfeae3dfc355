"""What the executor reads straight from `_delta_log` agrees with Delta's own snapshot and history."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from compactor.client.loader import sample_rows
from compactor.delta.files import HadoopFiles
from compactor.delta.log import CommitFacts, DeltaLogReader
from compactor.delta.merge import execute_merge
from compactor.delta.paths import table_uri
from compactor.delta.reads import segments_with_rows
from compactor.delta.writes import write_segment
from compactor.domain.plans import make_plan
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

    again = execute_merge(spark, warehouse, plan, depth=3)
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

"""What the executor reads straight from `_delta_log` agrees with Delta's own snapshot and history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from compactor import delta_executor
from compactor.delta_executor import execute_merge, segments_with_rows, table_path, write_segment
from compactor.domain import Segment, TimeRange, make_plan
from compactor.loader import sample_rows

pytestmark = pytest.mark.integration

DAY = datetime(2024, 3, 1, tzinfo=UTC)


def load(spark: Any, warehouse: Path, sid: str, day: int, rows: int = 20) -> Segment:
    start = DAY + timedelta(days=day)
    segment = Segment(sid, "t", TimeRange(start, start + timedelta(days=1)), loaded_at=start)
    return write_segment(
        spark, warehouse, segment, sample_rows(spark, start, start + timedelta(days=1), rows)
    )


def test_segments_with_rows_agrees_with_the_snapshot_through_adds_removes_and_old_commits(
    spark: Any, warehouse: Path
) -> None:
    a, b, _ = (
        load(spark, warehouse, sid, i) for i, sid in enumerate(["a:1", "b", "c"])
    )  # ':' is escaped in paths
    assert (a.records, b.records) == (20, 20)
    ids = ["a:1", "b", "c", "ghost"]
    assert segments_with_rows(spark, warehouse, "t", ids) == {"a:1", "b", "c"}

    plan = make_plan("t", "test", [a, b])
    execute_merge(spark, warehouse, plan)  # removes a and b, adds the output
    output = plan.output.id
    expected = {"c", output}
    assert segments_with_rows(spark, warehouse, "t", [*ids, output]) == expected
    # depth 0 skips the commit files entirely: the snapshot lookup alone must agree
    assert segments_with_rows(spark, warehouse, "t", [*ids, output], depth=0) == expected
    # depth 1 sees only the merge commit: c (loaded earlier) comes from the snapshot lookup
    assert segments_with_rows(spark, warehouse, "t", ["c", output, "a:1"], depth=1) == {"c", output}
    snapshot = {
        r.segment_id for r in DeltaTable.forPath(spark, str(table_path(warehouse, "t"))).toDF().collect()
    }
    assert snapshot == expected


def test_commit_lookup_matches_delta_history_and_a_replayed_plan_is_not_written_twice(
    spark: Any, warehouse: Path
) -> None:
    a, b = load(spark, warehouse, "a", 0), load(spark, warehouse, "b", 1)
    plan = make_plan("t", "test", [a, b])
    first = execute_merge(spark, warehouse, plan)
    path = table_path(warehouse, "t")
    history = DeltaTable.forPath(spark, str(path)).history(1).collect()[0]
    assert (first.version, first.records_out) == (history.version, 40)
    assert first.bytes_out == int(history.operationMetrics["numOutputBytes"]) > 0
    assert not first.already_done

    again = execute_merge(spark, warehouse, plan)
    assert again.already_done and again.version == first.version
    assert delta_executor._find_commit(path, f'"plan_id":"{plan.plan_id}"') == (
        first.version,
        40,
        first.bytes_out,
        False,  # a plain merge only rearranged rows
    )
    assert delta_executor._find_commit(path, '"plan_id":"no-such-plan"') is None
    assert DeltaTable.forPath(spark, str(path)).history().count() == first.version + 1  # no extra commit

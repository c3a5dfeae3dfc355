"""The catalog folds changes: each applied twice is a no-op, and its view agrees with the commits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compactor.catalog.changes import (
    CommitRecord,
    PlanApplied,
    SegmentAdded,
    SegmentsGone,
    SegmentUpdated,
    TableReloaded,
)
from compactor.catalog.fold import SegmentCatalog
from compactor.catalog.retired import RetiredSegment
from compactor.domain.plans import make_plan
from compactor.domain.segments import Origin
from compactor.errors import InvalidSegmentError
from tests.helpers.segments import seg

A, B, C = (seg(sid, f"2024-01-0{i}", table="sales") for i, sid in enumerate("abc", start=1))


def test_a_load_is_recorded_once_and_an_id_never_changes_its_content() -> None:
    catalog = SegmentCatalog()
    assert catalog.apply(SegmentAdded(A)) is True
    assert catalog.apply(SegmentAdded(A)) is False
    with pytest.raises(InvalidSegmentError, match="already known with other content"):
        catalog.apply(SegmentAdded(replace(A, records=A.records + 1)))


def test_a_plan_replaces_its_inputs_and_a_replay_changes_nothing() -> None:
    catalog = SegmentCatalog()
    for s in (A, B, C):
        catalog.apply(SegmentAdded(s))
    plan = make_plan("sales", "auto_merge", [A, B])
    assert catalog.apply(PlanApplied(plan, (plan.output,), version=4)) is True
    assert catalog.apply(PlanApplied(plan, (plan.output,), version=4)) is False
    assert {s.id for s in catalog.segments("sales")} == {"c", plan.output.id}
    assert catalog.retired("sales", "a") and catalog.knows("sales", "a") and catalog.get("sales", "a") is None
    assert catalog.apply(SegmentAdded(A)) is False, "a re-delivered load of a merged-away segment"


def test_updates_keep_the_range_and_need_a_known_segment() -> None:
    catalog = SegmentCatalog()
    catalog.apply(SegmentAdded(A))
    assert catalog.apply(SegmentUpdated(replace(A, sub_partitions=frozenset({"eu"}))))
    with pytest.raises(InvalidSegmentError, match="differs from the known"):
        catalog.apply(SegmentUpdated(replace(A, range=B.range)))
    with pytest.raises(InvalidSegmentError, match="is not known"):
        catalog.apply(SegmentUpdated(C))


def test_the_history_folds_to_the_segments_and_the_plans_that_made_them() -> None:
    plan = make_plan("sales", "minor", [A, B], output_level=1)
    commits = [
        CommitRecord("sales", 0, (A,), ()),
        CommitRecord("sales", 1, (B,), ()),
        CommitRecord(
            "sales", 2, (plan.output,), ("a", "b"), plan.plan_id, "merge", {"numOutputRows": 7}, "minor"
        ),
    ]
    catalog = SegmentCatalog.from_commits({"sales": commits, "empty": []})
    (only,) = catalog.segments("sales")
    assert only.id == plan.output.id and only.records == 7, "sizes come from the commit's metrics"
    (executed,) = catalog.executed_plans("sales")
    assert (executed.version, executed.plan.plan_id, executed.plan.input_ids) == (2, plan.plan_id, ("a", "b"))
    assert catalog.was_executed("sales", plan.plan_id) and catalog.table_names == ["sales", "empty"]


def test_reconciling_with_the_table_drops_what_it_no_longer_holds_and_reports_what_it_never_recorded() -> (
    None
):
    catalog = SegmentCatalog()
    for s in (A, B):
        catalog.apply(SegmentAdded(s))
    unknown, gone = catalog.reconcile("sales", {"a": 3, "stray": 9})
    assert (unknown, gone) == ({"stray"}, {"b"})
    assert [s.id for s in catalog.segments("sales")] == ["a"]
    assert catalog.apply(SegmentsGone("sales", frozenset({"b"}))) is False


def test_reconciling_keeps_a_merge_output_that_kept_no_row() -> None:
    catalog = SegmentCatalog()
    empty = replace(C, id="m-empty", records=0, origin=Origin.MERGE)
    for s in (A, replace(B, records=0), empty):
        catalog.apply(SegmentAdded(s))
    unknown, gone = catalog.reconcile("sales", {"a": 3})
    assert (unknown, gone) == (set(), {"b"}), "a loaded segment with no rows in Delta is gone"
    assert [s.id for s in catalog.segments("sales")] == ["a", "m-empty"]


def test_a_reloaded_table_takes_the_recorded_segments() -> None:
    catalog = SegmentCatalog()
    catalog.apply(SegmentAdded(A))
    recorded = replace(A, records=99)
    catalog.apply(TableReloaded("sales", (recorded, C), (RetiredSegment.of(B, "p1"),)))
    assert catalog.get("sales", "a") == recorded and catalog.retired("sales", "b")
    assert catalog.retired_ids("sales") == frozenset({"b"})


def test_a_merge_commit_that_wrote_no_row_folds_to_an_empty_output_whoever_records_it_first() -> None:
    """Upsert compaction of segments whose every row was superseded: Delta's overwrite wrote
    nothing and recorded no `numOutputRows`; the output holds no row, not the plan's estimate."""
    a, b = replace(A, records=12), replace(B, records=12)
    plan = make_plan("sales", "upsert_compaction", [a, b])
    assert plan.output.records == 24, "the plan's estimate"
    empty = CommitRecord(
        "sales", 5, (plan.output,), (A.id, B.id), plan.plan_id, "merge", {"numRemovedFiles": 2},
        rule="upsert_compaction",
    )  # fmt: skip
    for first_the_commit in (True, False):
        catalog = SegmentCatalog()
        catalog.apply(SegmentAdded(a))
        catalog.apply(SegmentAdded(b))
        changes = [empty, PlanApplied(plan, (replace(plan.output, records=0, bytes=0),), version=5)]
        for change in changes if first_the_commit else reversed(changes):
            catalog.apply(change)
        (output,) = catalog.segments("sales")
        assert (output.id, output.records, output.bytes) == (plan.output.id, 0, 0)

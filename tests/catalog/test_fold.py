"""The catalog folds changes: each applied twice is a no-op, and its view agrees with the commits."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta

import pytest

from compactor.catalog import fold
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
from compactor.catalog.store import StoredCatalog
from compactor.domain.plans import make_plan
from compactor.domain.segments import Origin, Segment
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


# -- bounded over years: what the catalog keeps in memory -----------------------------------------


def _days(n: int, table: str = "sales") -> list[Segment]:
    return [
        seg(f"d{i:03d}", (date(2024, 1, 1) + timedelta(days=i)).isoformat(), table=table) for i in range(n)
    ]


def test_the_catalog_keeps_only_the_newest_retired_records_and_plan_ids_and_knows_the_rest_may_be_retired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fold, "RETIRED_KEPT", 10)
    monkeypatch.setattr(fold, "PLANS_KEPT", 4)
    catalog, days = SegmentCatalog(), _days(200)
    plans = []
    for first in range(0, 200, 2):
        pair = days[first : first + 2]
        for s in pair:
            catalog.apply(SegmentAdded(s))
        plans.append(plan := make_plan("sales", "auto_merge", pair))
        assert catalog.apply(PlanApplied(plan, (plan.output,), version=first))
    assert len(catalog.retired_ids("sales")) == 10 and len(catalog.retired_records("sales")) == 10
    assert catalog.retired_ids("sales") == {s.id for s in days[-10:]}, "the newest are kept"
    assert sum(catalog.was_executed("sales", p.plan_id) for p in plans) == 4
    assert not catalog.retired("sales", "d000") and catalog.retired_record("sales", "d000") is None
    assert all(catalog.may_be_retired("sales", s.id) for s in days), "the filter holds every id"
    assert len(catalog.take_changes().retired) == 200, "every record goes to the store"

    old = plans[0]
    assert catalog.apply(PlanApplied(old, (old.output,), version=0)) is False, "a replay long after"
    assert not catalog.changed


def test_a_replayed_plan_whose_output_was_merged_again_since_changes_nothing() -> None:
    catalog = SegmentCatalog()
    for s in (A, B, C):
        catalog.apply(SegmentAdded(s))
    first = make_plan("sales", "auto_merge", [A, B])
    catalog.apply(PlanApplied(first, (first.output,), version=3))
    second = make_plan("sales", "auto_merge", [first.output, C])
    catalog.apply(PlanApplied(second, (second.output,), version=4))
    catalog.take_changes()
    assert catalog.apply(PlanApplied(first, (first.output,), version=3)) is False
    assert [s.id for s in catalog.segments("sales")] == [second.output.id], "its output is not revived"
    assert not catalog.changed


def test_the_commit_of_a_plan_applied_long_ago_is_folded_without_a_second_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fold, "RETIRED_KEPT", 2)
    catalog, days = SegmentCatalog(), _days(8)
    for s in days:
        catalog.apply(SegmentAdded(s))
    plan = make_plan("sales", "auto_merge", days[:2])
    catalog.apply(PlanApplied(plan, (plan.output,), version=5))
    later = make_plan("sales", "auto_merge", days[2:6])  # its records push the first plan's out
    catalog.apply(PlanApplied(later, (later.output,), version=6))
    catalog.take_changes()
    commit = CommitRecord(
        "sales", 5, (plan.output,), plan.input_ids, plan.plan_id, "merge", rule="auto_merge"
    )
    catalog.apply(commit)
    assert catalog.take_changes().retired == [], "its inputs were recorded when it was applied"


def test_executed_plans_are_kept_only_until_they_are_announced() -> None:
    days = _days(40)
    commits = [CommitRecord("sales", i, (s,), ()) for i, s in enumerate(days)]
    plans = [make_plan("sales", "auto_merge", days[i : i + 2]) for i in range(0, 40, 2)]
    version = len(commits)
    for plan in plans:
        commits.append(
            CommitRecord(
                "sales", version, (plan.output,), plan.input_ids, plan.plan_id, "merge", rule="auto_merge"
            )
        )
        version += 1
    catalog = SegmentCatalog.from_commits({"sales": commits[:50]})
    assert len(catalog.executed_plans("sales")) == 10, "never announced: every one is kept"
    catalog.mark_announced("sales", 47)
    assert [e.version for e in catalog.executed_plans("sales")] == [48, 49]
    for record in commits[50:55]:
        catalog.apply(record)
    catalog.mark_announced("sales", 55)
    for record in commits[55:]:
        catalog.apply(record)
    assert [e.version for e in catalog.executed_plans("sales")] == [56, 57, 58, 59]
    assert catalog.was_executed("sales", plans[-1].plan_id)


def test_the_versions_of_unannounced_merges_go_with_the_mark_and_are_recalled_after_a_restart() -> None:
    """The history of what to announce lives in memory; the mark carries its versions, so a
    restart whose mark is past them reads those commits again (`recovery._recall`)."""
    days = _days(4)
    plan = make_plan("sales", "auto_merge", days[:2])
    loads = [CommitRecord("sales", i, (s,), ()) for i, s in enumerate(days)]
    merge = CommitRecord("sales", 4, (plan.output,), plan.input_ids, plan.plan_id, "merge", rule="auto_merge")
    catalog = SegmentCatalog.from_commits({"sales": loads})
    catalog.mark_announced("sales", 3)
    catalog.apply(merge)
    changes = catalog.take_changes()
    assert changes.marks["sales"].unannounced == (4,)
    restarted = SegmentCatalog.from_store(StoredCatalog({"sales": catalog.segments("sales")}, changes.marks))
    assert restarted.executed_plans("sales") == []
    assert restarted.to_recall("sales") == (4,) and restarted.to_recall("sales") == (), "asked once"
    restarted.recall(merge)
    restarted.recall(merge)
    (executed,) = restarted.executed_plans("sales")
    assert (executed.version, executed.plan.plan_id, executed.plan.input_ids) == (
        4,
        plan.plan_id,
        plan.input_ids,
    )
    restarted.mark_announced("sales", 4)
    assert restarted.take_changes().marks["sales"].unannounced == ()
    restarted.recall(merge)
    assert restarted.executed_plans("sales") == [], "announced already: not recalled"


def test_an_event_that_does_not_tell_the_bytes_is_the_segment_its_commit_already_showed() -> None:
    """A table first read from its log knows a load's bytes; the load's event, from a producer
    that left them out (0), is the same segment again, not another under a reused id."""
    from compactor.domain.segment_set import arrives_new

    folded = seg("d0", "2024-01-01", records=10, bytes=4096)
    assert arrives_new(folded, replace(folded, bytes=0)) is False
    with pytest.raises(InvalidSegmentError):
        arrives_new(folded, replace(folded, bytes=0, records=11))


def test_a_plan_reported_failed_is_kept_for_announcing_though_later_merges_were_announced() -> None:
    """Its commit (version 3) is folded only after a later merge (version 4) was announced: it is
    kept all the same, until its own success is announced."""
    catalog = SegmentCatalog()
    d = _days(4)
    for s in d:
        catalog.apply(SegmentAdded(s))
    failed, later = make_plan("sales", "auto_merge", d[:2]), make_plan("sales", "auto_merge", d[2:])
    catalog.owe("sales", failed.plan_id)
    catalog.apply(PlanApplied(later, (later.output,), version=4))
    catalog.mark_announced("sales", 4)
    catalog.apply(
        CommitRecord(
            "sales", 3, (failed.output,), failed.input_ids, failed.plan_id, "merge", rule="auto_merge"
        )
    )
    assert [(e.version, e.plan.plan_id) for e in catalog.executed_plans("sales")] == [(3, failed.plan_id)]
    catalog.mark_announced("sales", 5)
    assert [e.version for e in catalog.executed_plans("sales")] == [3], "announcing others passes over it"
    catalog.settle("sales", failed.plan_id)
    catalog.mark_announced("sales", 6)
    assert catalog.executed_plans("sales") == []
    assert not catalog.owes("sales", failed.plan_id)


def test_the_newest_versions_count_the_jobs_own_merges_beyond_the_fold_mark() -> None:
    """The log's maintainer counts a table's commits from here: a merge committed after the last
    fold (no load since) must count, or its log grows unchecked (bench/log_upkeep.py: 56 commits)."""
    catalog = SegmentCatalog()
    for s in (A, B, C):
        catalog.apply(SegmentAdded(s))
    catalog.advance("sales", 10)
    plan = make_plan("sales", "auto_merge", [A, B])
    catalog.apply(PlanApplied(plan, (plan.output,), version=12))
    assert catalog.versions() == {"sales": 10}, "the fold mark stays: version 11 is not folded"
    assert catalog.newest_versions() == {"sales": 12}
    catalog.advance("sales", 15)
    assert catalog.newest_versions() == {"sales": 15}
    other = make_plan("sales", "auto_merge", [C, plan.output])
    catalog.apply(PlanApplied(other, (other.output,), version=None))
    assert catalog.newest_versions() == {"sales": 15}, "a replay without a version changes nothing"

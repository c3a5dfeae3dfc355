"""Attempts after an event look near its segment; a full evaluation a minute finds the rest."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

from compactor.domain.events import MergeStatus
from compactor.domain.plans import make_plan
from compactor.stream.merging.workers import thread_workers
from tests.helpers.harness import Harness
from tests.stream.test_concurrency import until

WEEKS = {
    "defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]},
    "operations": {"cool_down": "30s"},
}


def attempts(harness_handler: object, scope: str) -> float:
    registry = harness_handler.metrics.registry  # type: ignore[attr-defined]
    return registry.get_sample_value("compactor_plan_attempts_total", {"scope": scope}) or 0.0


def test_a_plan_waiting_outside_the_events_buckets_is_found_by_the_next_full_evaluation(
    harness: Harness,
) -> None:
    harness.store.create("t")
    handler = harness.handler(WEEKS)
    first_week = [harness.day(i) for i in range(7)]  # 2024-01-01 is a Monday
    week_merge = make_plan("t", "auto_merge", first_week, level="week").plan_id
    harness.store.failures[week_merge] = RuntimeError("disk full")
    handler.process(harness.loaded(*first_week))
    assert harness.statuses() == [MergeStatus.FAILED]
    del harness.store.failures[week_merge]  # the disk has room again
    assert (attempts(handler, "full"), attempts(handler, "near")) == (1, 6), "the first attempt is full"

    harness.clock.now += timedelta(seconds=10)
    handler.process(harness.loaded(harness.day(14)))  # near the third week, and the first: cooling
    harness.clock.now += timedelta(seconds=25)  # the failed plan has cooled down
    handler.process(harness.loaded(harness.day(15)))
    assert len(harness.store.calls) == 1, "an attempt near the third week does not look at the first"
    assert attempts(handler, "near") == 8

    harness.clock.now += timedelta(seconds=30)  # a minute after the last full evaluation
    handler.process(harness.loaded(harness.day(16)))
    assert attempts(handler, "full") == 2
    assert harness.statuses() == [MergeStatus.FAILED, MergeStatus.SUCCEEDED]
    assert harness.results()[-1]["plan_id"] == week_merge


def test_after_a_full_evaluation_that_planned_the_next_attempts_are_full_too(harness: Harness) -> None:
    """A backlog (here: two weeks complete at the first event) is merged back to back, not one
    merge a minute: only a full evaluation that finds nothing to run lets attempts narrow."""
    harness.store.create("t")
    handler = harness.handler(WEEKS)
    two_weeks = [harness.day(i) for i in range(14)]
    handler.process(harness.loaded(*two_weeks[:13]))  # the first week merges on its seventh day
    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    handler.process(harness.loaded(two_weeks[13]))  # near: the second week completes
    assert harness.statuses() == [MergeStatus.SUCCEEDED, MergeStatus.SUCCEEDED]

    harness.store.create("u")
    backlog = [harness.day(i, table="u") for i in range(14)]
    harness.store.failures.update(
        {
            make_plan("u", "auto_merge", backlog[w : w + 7], level="week").plan_id: RuntimeError("x")
            for w in (0, 7)
        }
    )
    handler.process(harness.loaded(*backlog))
    harness.store.failures.clear()
    harness.clock.now += timedelta(seconds=61)  # cooled down; the next evaluation is full
    handler.process(harness.loaded(harness.day(20, table="u")))
    assert harness.statuses()[-1] is MergeStatus.SUCCEEDED  # one merge per attempt: the first week
    full = attempts(handler, "full")
    merged = harness.publisher.on("segments")[-1]  # the merge's own completion event comes back
    handler.process([harness.envelope(merged[2], key="u")])
    assert attempts(handler, "full") == full + 1, "the full evaluation before found more to run"
    assert harness.statuses()[-1] is MergeStatus.SUCCEEDED  # the second week
    assert [r["plan_id"] for r in harness.results()[-2:]] == harness.store.calls[-2:]


def test_after_a_size_threshold_merge_near_a_load_the_next_attempt_is_full(harness: Harness) -> None:
    """Major compaction: its inputs leaving frees room in the walk anywhere, so the attempt
    after its merge looks at the whole table; the merges are those full attempts make."""
    harness.store.create("t")
    handler = harness.handler({"defaults": {"rules": [{"rule": "major", "size_threshold": 1000}]}})
    big = [replace(harness.day(i), bytes=size) for i, size in enumerate((600, 500, 450))]
    handler.process(harness.loaded(*big))  # the walk takes d00 alone: 600 + 500, 600 + 450 overflow
    assert harness.store.calls == []
    full, near = attempts(handler, "full"), attempts(handler, "near")
    small = replace(harness.day(3), bytes=50)
    handler.process(harness.loaded(small))  # near: d00 + d03 fit
    assert (attempts(handler, "full"), attempts(handler, "near")) == (full, near + 1)
    assert harness.store.calls == [make_plan("t", "major", [big[0], small]).plan_id]
    merged = harness.publisher.on("segments")[-1]
    handler.process([harness.envelope(merged[2])])  # d00 gone: d01 + d02 (950) fit now
    assert attempts(handler, "full") == full + 1, "the attempt after the major merge is full"
    assert harness.store.calls[-1] == make_plan("t", "major", big[1:]).plan_id


def test_a_time_layer_held_back_by_a_running_merge_is_merged_once_it_ends(harness: Harness) -> None:
    """Week 1 merges; while it runs, week 4 completes far from it and waits (time layers merge
    one at a time). The attempts that follow week 1's merge look near its output, where nothing
    is left: week 4 must still merge, not wait for the next full evaluation a minute later."""
    harness.store.create("t")
    gate = harness.store.gates["t"] = threading.Event()
    handler = harness.handler(WEEKS, thread_workers(2))
    days = [harness.day(i) for i in range(7)]
    handler.process(harness.loaded(*days))  # week 1 complete: its merge starts, and is held
    until(lambda: len(harness.store.entered) == 1)
    handler.process(harness.loaded(*(harness.day(i) for i in range(21, 29))))  # week 4, far away
    assert handler.merges.inflight.running() == 1 and harness.statuses() == []
    gate.set()
    seen = len(harness.publisher.on("segments"))
    for _ in range(4):  # each merge's completion event comes back, as the topic brings it
        handler.settle()
        events = harness.publisher.on("segments")[seen:]
        seen += len(events)
        handler.process([harness.envelope(e[2], key="t") for e in events])
    handler.settle()
    weeks = sorted(r["output"]["start"].date().isoformat() for r in harness.results())
    assert weeks == ["2024-01-01", "2024-01-22"], "both weeks merged, within the minute"
    handler.close()

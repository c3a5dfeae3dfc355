"""Attempts after an event look near its segment; a full evaluation a minute finds the rest."""

from __future__ import annotations

from datetime import timedelta

from compactor.domain.events import MergeStatus
from compactor.domain.plans import make_plan
from tests.stream.conftest import Harness

WEEKS = {
    "defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]},
    "operations": {"cool_down": "30s"},
}


def attempts(harness_handler: object, scope: str) -> float:
    registry = harness_handler.state.metrics.registry  # type: ignore[attr-defined]
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

    harness.clock.now += timedelta(seconds=35)  # the failed plan has cooled down
    handler.process(harness.loaded(harness.day(14)))  # a day of the third week
    assert len(harness.store.calls) == 1, "an attempt near the third week does not look at the first"
    assert attempts(handler, "near") == 7

    harness.clock.now += timedelta(seconds=30)  # a minute after the last full evaluation
    handler.process(harness.loaded(harness.day(15)))
    assert attempts(handler, "full") == 2
    assert harness.statuses() == [MergeStatus.FAILED, MergeStatus.SUCCEEDED]
    assert harness.results()[-1]["plan_id"] == week_merge

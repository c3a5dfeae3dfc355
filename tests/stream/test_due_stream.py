"""Attempts that come due with time: no event needed once a pool's age, a schedule, a cool-down
or an off-peak window makes a merge possible; a restart derives the same due times."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

import compactor.rules
from compactor.domain.events import MergeStatus
from compactor.domain.segments import Segment, TimeRange
from compactor.rules.due import Due
from compactor.stream.due import DueTimes
from compactor.stream.handler import BatchHandler
from tests.helpers import memory_store
from tests.helpers.harness import Harness

POOLS = [
    {"name": "fresh", "max_age": "10m", "max_size": "1GB", "max_width": "1h"},
    {"name": "settled", "min_age": "10m", "max_age": "90d", "max_size": "4GB", "max_width": "1h"},
]
BIN_PACK = {"defaults": {"rules": [{"rule": "bin_pack", "pools": POOLS}]}}
GB = 1 << 30
RULES = str(Path(compactor.rules.__file__).parent)


def recent(harness: Harness, sid: str, size: int, minutes_ago: float) -> Segment:
    end = harness.clock.now - timedelta(minutes=minutes_ago)
    return Segment(sid, "t", TimeRange(end - timedelta(minutes=5), end), harness.clock.now, 10, bytes=size)


def test_a_table_that_stops_loading_merges_once_its_pool_age_passes_across_a_restart(
    harness: Harness,
) -> None:
    """A 2 GB load is too big for `fresh`; it reaches `settled` ten minutes after its data
    ends. Nothing more is loaded, the job restarts in between, and the merge still happens."""
    harness.store.create("t")
    handler = harness.handler(BIN_PACK)
    handler.process(harness.loaded(recent(harness, "big", 2 * GB, 1), recent(harness, "small", GB, 2)))
    assert harness.results() == []
    due = handler.planner.due.get("t")
    assert due is not None and due.at == harness.clock.now + timedelta(minutes=8)  # `small` settles first

    harness.clock.now += timedelta(minutes=5)
    restarted = harness.handler(BIN_PACK)
    restarted.tick()  # every table is attempted at start; that derives its due time again
    assert restarted.planner.due.get("t") == due
    assert restarted.stats.due_attempts == 1

    harness.clock.now += timedelta(minutes=3)  # `small` settles; `big` is still fresh and too big
    restarted.tick()
    assert harness.results() == []
    harness.clock.now += timedelta(minutes=1)
    restarted.tick()
    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    assert sorted(harness.results()[0]["inputs"]) == ["big", "small"]
    assert restarted.stats.due_attempts == 3 and restarted.stats.events == 0


def test_a_schedule_fires_a_manual_major_merge(harness: Harness) -> None:
    nightly = {"rule": "major", "trigger": "manual", "schedule": "0 2 * * *", "size_threshold": "1GB"}
    harness.store.create("t")
    harness.clock.now = datetime(2024, 6, 1, 23, 0, tzinfo=UTC)
    handler = harness.handler({"defaults": {"rules": [nightly]}})
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    assert harness.results() == [], "a manual rule does not run on loads"
    due = handler.planner.due.get("t")
    assert due is not None and due.rule == "major" and due.at == datetime(2024, 6, 2, 2, 0, tzinfo=UTC)
    harness.clock.now = datetime(2024, 6, 2, 1, 59, tzinfo=UTC)
    handler.tick()
    assert harness.results() == []
    harness.clock.now = datetime(2024, 6, 2, 2, 0, 3, tzinfo=UTC)  # the tick comes a little late
    handler.tick()
    assert harness.statuses() == [MergeStatus.SUCCEEDED] and harness.results()[0]["rule"] == "major"
    next_fire = handler.planner.due.get("t")
    assert next_fire is not None and next_fire.at == datetime(2024, 6, 3, 2, 0, tzinfo=UTC)


def test_a_failed_plan_is_tried_again_when_its_cool_down_ends_without_an_event(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler({"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}})
    segments = [harness.day(i) for i in range(3)]
    harness.store.always_conflicting = True
    handler.process(harness.loaded(*segments))
    assert harness.statuses() == [MergeStatus.FAILED]
    due = handler.planner.due.get("t")
    assert due is not None and due.at == harness.clock.now + timedelta(minutes=5)
    assert due.why.startswith("the cool-down of ")
    harness.store.always_conflicting = False
    harness.clock.now += timedelta(minutes=5)
    handler.tick()
    assert harness.statuses() == [MergeStatus.FAILED, MergeStatus.SUCCEEDED]


def test_optional_merges_wait_for_the_off_peak_window(harness: Harness) -> None:
    """The week is an optional merge (its layer is the largest); required day merges run."""
    layers = {"rule": "auto_merge", "levels": ["day", "week"]}
    config = {"defaults": {"rules": [layers]}, "operations": {"off_peak": {"start": "22:00", "end": "06:00"}}}
    harness.store.create("t")
    harness.clock.now = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
    handler = harness.handler(config)
    handler.process(harness.loaded(*(replace(harness.day(i), bytes=10) for i in range(7))))
    assert harness.results() == []
    due = handler.planner.due.get("t")
    assert due is not None and due.at == datetime(2024, 6, 1, 22, 0, tzinfo=UTC) and "off-peak" in due.why
    harness.clock.now = datetime(2024, 6, 1, 22, 0, 1, tzinfo=UTC)
    handler.tick()
    assert harness.statuses() == [MergeStatus.SUCCEEDED]


def settled(harness: Harness, tables: int) -> BatchHandler:
    """A handler after its start-up attempts (64 tables a tick) over `tables` tables of one day
    each, under a rule nothing of which depends on time."""
    for i in range(tables):
        harness.store.load(harness.day(0, table=f"t{i}"))
    handler = harness.handler({"defaults": {"rules": [{"rule": "minor"}]}})
    for _ in range(tables):
        if handler.stats.attempts >= tables:
            break
        handler.tick()
    for _ in range(3):
        handler.tick()
    handler.keeper.save()  # nothing left for a tick's timed save: under load it came in one run only
    assert handler.stats.attempts == tables and len(handler.planner.due) == 0
    return handler


def tick_calls(handler: BatchHandler) -> Counter[tuple[str, str]]:
    """What one tick costs: each Python function it called (file, name) and how often."""
    calls: Counter[tuple[str, str]] = Counter()

    def record(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            calls[frame.f_code.co_filename, frame.f_code.co_qualname] += 1

    sys.setprofile(record)
    try:
        handler.tick()
    finally:
        sys.setprofile(None)
    return calls


def test_a_tick_with_nothing_due_attempts_no_table_and_costs_no_more_with_more_tables(tmp_path: Path) -> None:
    """With no table due, a tick attempts none: it evaluates no rule, reads no table, saves and
    sends nothing, and does the same work for 3000 tables as for 300 (it looks at the soonest
    due time, never at each table)."""
    harness = Harness(tmp_path)
    handler = settled(harness, 300)
    attempts, sent = handler.stats.attempts, len(harness.publisher.sent)
    idle = [tick_calls(handler) for _ in range(50)]
    assert handler.stats.attempts == attempts and len(harness.publisher.sent) == sent
    ran = {path for calls in idle for path, _ in calls}
    assert not {p for p in ran if p.startswith(RULES)}, "no rule is evaluated"
    assert memory_store.__file__ not in ran, "no table is read, no catalog saved, nothing sent"
    assert idle[-1] == tick_calls(settled(Harness(tmp_path), 3000)), "ten times the tables, the same work"


def test_due_times_pop_soonest_first_and_a_later_setting_replaces_an_earlier() -> None:
    due, t0 = DueTimes(), datetime(2024, 1, 1, tzinfo=UTC)
    due.set("a", Due(t0 + timedelta(minutes=5), "a"), t0)
    due.set("b", Due(t0 + timedelta(minutes=1), "b"), t0)
    due.set("a", Due(t0 + timedelta(minutes=2), "a again"), t0)  # replaces a's entry
    due.lower("b", Due(t0 + timedelta(minutes=3), "later: ignored"))
    assert due.next_at() == t0 + timedelta(minutes=1)
    assert due.pop_due(t0) == []
    assert [(t, d.why) for t, d in due.pop_due(t0 + timedelta(minutes=10))] == [("b", "b"), ("a", "a again")]
    assert due.next_at() is None and len(due) == 0

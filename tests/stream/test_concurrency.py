"""Merges side by side on worker threads: slots, pools, bookings and each table's commit order.

The in-memory store holds a merge in flight on a gate (before or after its commit), so a
test decides what overlaps instead of sleeping and hoping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from compactor.domain.events import MergeStatus
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.stream.handler import BatchHandler
from compactor.stream.merging.workers import thread_workers
from tests.helpers.harness import Harness

MINOR = {"rule": "minor", "level_thresholds": [3, 0]}


def config(**operations: Any) -> dict[str, Any]:
    return {"defaults": {"rules": [MINOR]}, "operations": operations}


def until(check: Callable[[], bool], handler: BatchHandler | None = None, timeout: float = 10.0) -> None:
    """Tick (the dispatcher thread's work) until `check` holds; a test fails rather than hangs."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        if handler is not None:
            handler.merges.inflight.wait(0.05)
            handler.tick()
        else:
            time.sleep(0.01)


def three_loads(harness: Harness, table: str) -> list[Any]:
    harness.store.create(table)
    return harness.loaded(*(harness.day(i, sid=f"{table}{i}", table=table) for i in range(3)))


def merged_tables(harness: Harness) -> list[str]:
    return [r["table"] for r in harness.results() if r["status"] is MergeStatus.SUCCEEDED]


def test_other_tables_merge_while_one_merge_is_held(harness: Harness) -> None:
    """A long merge of one table holds no other table's merge back, nor the next batch."""
    slow = harness.store.gates["slow"] = threading.Event()
    handler = harness.handler(config(max_concurrent_merges=4), thread_workers(4))
    handler.process(three_loads(harness, "slow"))
    until(lambda: len(harness.store.entered) == 1)
    handler.process([*three_loads(harness, "a"), *three_loads(harness, "b")])  # not held behind it
    until(lambda: sorted(merged_tables(harness)) == ["a", "b"], handler)
    assert handler.merges.inflight.running() == 1, "the slow merge is still in flight"
    slow.set()
    handler.settle()
    assert sorted(merged_tables(harness)) == ["a", "b", "slow"]
    assert merged_tables(harness)[-1] == "slow"
    handler.close()


def test_no_more_merges_run_than_slots(harness: Harness) -> None:
    for table in "abc":
        harness.store.gates[table] = threading.Event()
    handler = harness.handler(config(max_concurrent_merges=2), thread_workers(2))
    handler.process([e for t in "abc" for e in three_loads(harness, t)])
    until(lambda: len(harness.store.entered) == 2)
    time.sleep(0.1)  # a third would have entered by now if a slot were free
    assert len(harness.store.entered) == 2 and handler.merges.inflight.running() == 2
    assert len(handler.merges.waiting.tables()) == 1, "the third waits for a slot"
    for gate in harness.store.gates.values():
        gate.set()
    handler.settle()
    assert sorted(merged_tables(harness)) == ["a", "b", "c"]
    handler.close()


def test_a_pool_runs_within_its_concurrency_while_another_pool_moves(harness: Harness) -> None:
    """Seed 003: an `old` pool of one replica runs one merge at a time, though slots are free;
    the `fresh` pool's merge commits while the old one is held."""
    pools = [
        {"name": "fresh", "max_age": "1d", "max_size": "1GB", "max_width": "2d", "scale_profile": "I"},
        {"name": "old", "min_age": "1d", "max_age": "1000d", "max_size": "4GB", "max_width": "2d",
         "replicas": "1-1"},
    ]  # fmt: skip
    cfg = {"defaults": {"rules": [{"rule": "bin_pack", "pools": pools}]}}
    now = harness.clock.now
    recent = [
        Segment(f"s{i}", "s", TimeRange(now - timedelta(hours=3 - i), now - timedelta(hours=2 - i)), now, 10)
        for i in range(2)
    ]
    harness.store.create("s")
    old = {t: [harness.day(i, sid=f"{t}{i}", table=t) for i in range(2)] for t in ("x", "y")}
    held = harness.store.gates["x"] = threading.Event()
    handler = harness.handler(cfg, thread_workers(4))
    handler.process(harness.loaded(*old["x"], *old["y"]))
    until(lambda: len(harness.store.entered) == 1)
    assert handler.merges.inflight.running() == 1 and handler.merges.waiting.tables() == ["y"], (
        "y waits for the pool"
    )
    handler.process(harness.loaded(*recent))
    until(lambda: merged_tables(harness) == ["s"], handler)
    assert [p.pool for p in handler.merges.inflight.running_plans()] == ["old"]
    held.set()
    handler.settle()
    assert merged_tables(harness) == ["s", "x", "y"]
    handler.close()


def test_disjoint_plans_of_one_table_run_side_by_side_and_announce_in_commit_order(
    harness: Harness,
) -> None:
    """Two level-1 groups of one table merge at once; the group that committed first is
    announced first, even when its worker reports last."""
    harness.store.create("t")
    handler = harness.handler(
        {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 0]}]}}, thread_workers(4)
    )
    loads = [harness.day(i) for i in range(4)]
    first = make_plan("t", "minor", loads[:2], level="level-1")
    second = make_plan("t", "minor", loads[2:], level="level-1")
    late_report = harness.store.after_gates[first.plan_id] = threading.Event()
    hold_second = harness.store.gates[second.plan_id] = threading.Event()
    handler.process(harness.loaded(*loads))
    until(lambda: set(harness.store.entered) == {first.plan_id, second.plan_id})
    # both in flight at once; the first commits (and stops before reporting), then the second
    until(lambda: harness.store.committed_version("t", first.plan_id) is not None)
    hold_second.set()
    until(lambda: harness.store.committed_version("t", second.plan_id) is not None)
    for _ in range(5):
        handler.merges.inflight.wait(0.05)
        handler.tick()
    assert harness.results() == [], "the second committed after the first: it waits for the first's report"
    late_report.set()
    handler.settle()
    announced = [r["plan_id"] for r in harness.results()]
    assert announced == [first.plan_id, second.plan_id]
    versions = [r["table_version"] for r in harness.results()]
    assert versions == sorted(versions)
    handler.close()


def test_a_freed_slot_goes_to_one_waiting_plan(harness: Harness) -> None:
    gates = {t: harness.store.gates.setdefault(t, threading.Event()) for t in "abcd"}
    handler = harness.handler(config(max_concurrent_merges=2), thread_workers(2))
    handler.process([e for t in "abcd" for e in three_loads(harness, t)])
    until(lambda: len(harness.store.entered) == 2)
    gates["a"].set()
    until(lambda: merged_tables(harness) == ["a"], handler)
    until(lambda: len(harness.store.entered) == 3, handler)
    assert handler.merges.inflight.running() == 2 and len(handler.merges.waiting.tables()) == 1
    for gate in gates.values():
        gate.set()
    handler.settle()
    assert sorted(merged_tables(harness)) == ["a", "b", "c", "d"]
    handler.close()

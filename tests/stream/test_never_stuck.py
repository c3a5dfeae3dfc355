"""Never stuck, and saying why (against the in-memory store): a merge that hangs past its time
bound is cancelled, its slot freed and the plan tried again after a cool-down that grows with
each failure in a row; a table whose merges keep failing is quarantined with its last error while
the others merge on, and its config changing or an operator enabling it releases it."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from compactor.domain.events import MergeStatus
from compactor.domain.plans import make_plan
from compactor.stream.merging.workers import thread_workers
from compactor.stream.runner import quarantine_error
from compactor.stream.triggers import Envelope, Trigger
from tests.helpers.harness import Harness
from tests.stream.test_concurrency import three_loads, until

MINOR = {"rule": "minor", "level_thresholds": [3, 0]}


def config(**operations: Any) -> dict[str, Any]:
    return {"defaults": {"rules": [MINOR]}, "operations": {"cool_down": "60s", **operations}}


def test_a_hung_merge_is_cancelled_its_slot_freed_and_the_table_merges_after_its_cool_down(
    harness: Harness,
) -> None:
    hang = harness.store.gates["slow"] = threading.Event()
    cfg = config(max_concurrent_merges=1, merge_timeout_floor="1s", merge_timeout="1s")
    handler = harness.handler(cfg, thread_workers(2))
    handler.process(three_loads(harness, "slow"))
    until(lambda: len(harness.store.entered) == 1)
    plan_id = harness.store.entered[0]
    time.sleep(1.2)  # past its bound
    handler.tick()
    assert harness.store.cancelled == [plan_id], "its Spark jobs cancelled, its commit fenced"
    until(lambda: harness.statuses() == [MergeStatus.FAILED], handler)
    assert (
        "MergeCancelled" in harness.results()[0]["error"]
        and "past its bound of 1s" in harness.results()[0]["error"]
    )
    stats = handler.stats
    assert (stats.cancelled_merges, stats.failed_merges) == (1, 1)
    assert handler.merges.inflight.free_slots() == 1, "the slot is free again"
    hang.set()  # the hung worker wakes up: what it reports is ignored
    time.sleep(0.2)
    handler.tick()
    assert harness.statuses() == [MergeStatus.FAILED] and stats.merges == 0
    del harness.store.gates["slow"]
    harness.store.cancelled.clear()
    harness.clock.now += timedelta(minutes=2)  # its cool-down (one period: first failure) ends
    handler.tick()
    until(lambda: harness.statuses() == [MergeStatus.FAILED, MergeStatus.SUCCEEDED], handler)


def test_a_table_whose_merges_keep_failing_is_quarantined_and_the_others_merge_on(harness: Harness) -> None:
    handler = harness.handler(config(quarantine_after=3))
    loads, plan_id = failing_loads(harness, ValueError("corrupt Parquet footer in bad0"))
    handler.process(loads)
    waits = []
    for _ in range(2):  # each cool-down twice the last: 60 s, then 120 s
        until_ends = handler.planner.cool_down.cooling("bad")[0][1] - harness.clock.now
        waits.append(until_ends)
        harness.clock.now += until_ends + timedelta(seconds=1)
        handler.process([])
        handler.tick()
    assert waits == [timedelta(seconds=60), timedelta(seconds=120)]
    note = handler.catalog.quarantined("bad")
    assert note is not None and quarantine_error(note)[0] == "ValueError: corrupt Parquet footer in bad0"
    assert harness.store.calls.count(plan_id) == 3

    handler.process(three_loads(harness, "good"))  # another table merges on
    assert [r["table"] for r in harness.results() if r["status"] is MergeStatus.SUCCEEDED] == ["good"]
    harness.clock.now += timedelta(hours=1)
    handler.process(harness.loaded(harness.day(9, sid="bad9", table="bad")))
    handler.tick()
    assert harness.store.calls.count(plan_id) == 3, "no attempt while quarantined"
    assert handler.stats.quarantined_attempts >= 1

    del harness.store.failures[plan_id]
    handler._dispatch(Trigger("bad", "control", merging=True))  # `compactor table enable bad`
    assert handler.catalog.quarantined("bad") is None
    handler.process(harness.loaded(harness.day(10, sid="bad10", table="bad")))
    assert "bad" in [r["table"] for r in harness.results() if r["status"] is MergeStatus.SUCCEEDED]


def test_a_quarantine_survives_a_restart_and_a_config_change_releases_it(harness: Harness) -> None:
    handler = harness.handler(config(quarantine_after=1))
    loads, plan_id = failing_loads(harness, ValueError("boom"))
    handler.process(loads)
    assert handler.catalog.quarantined("bad") is not None
    handler.keeper.save(set())
    again = harness.handler(config(quarantine_after=1))  # restarted: the mark keeps it
    assert again.catalog.quarantined("bad") is not None
    changed = {**config(quarantine_after=1), "tables": {"bad": {"rules": [MINOR], "priority": 2}}}
    del harness.store.failures[plan_id]
    third = harness.handler(changed)  # a new config version for the table
    third.process(harness.loaded(harness.day(5, sid="bad5", table="bad")))
    assert third.catalog.quarantined("bad") is None


def failing_loads(harness: Harness, error: Exception) -> tuple[list[Envelope], str]:
    """Three loads of table "bad" whose minor merge fails with `error`; the loads' events and
    that merge's plan id."""
    loads = three_loads(harness, "bad")
    plan_id = make_plan(
        "bad", "minor", [harness.day(i, sid=f"bad{i}", table="bad") for i in range(3)]
    ).plan_id
    harness.store.failures[plan_id] = error
    return loads, plan_id

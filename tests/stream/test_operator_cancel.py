"""An operator's cancel of a merge in flight (`compactor table cancel`), against the in-memory
store: the running merge is reported failed with the operator's request, its slot freed and its
commit fenced; the plan comes back after one cool-down and merges, and cancels neither lengthen
the table's cool-downs nor quarantine it. A cancel that finds no such merge changes nothing; a
cancel that asks for anything else is dead-lettered whole."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from compactor.domain.events import CompactionRequested, MergeStatus
from compactor.domain.plans import make_plan
from compactor.stream.handler import BatchHandler
from compactor.stream.merging.workers import thread_workers
from compactor.stream.triggers import Envelope
from tests.helpers.harness import DAY, Harness
from tests.stream.test_concurrency import three_loads, until

MINOR = {"rule": "minor", "level_thresholds": [3, 0]}
OTHER_PLAN = "0" * 24  # a well-formed plan id no merge runs under


def config(**operations: Any) -> dict[str, Any]:
    return {
        "defaults": {"rules": [MINOR]},
        "operations": {"cool_down": "60s", "max_concurrent_merges": 1, **operations},
    }


def request(harness: Harness, table: str = "slow", request_id: str = "r-cancel", **asked: Any) -> Envelope:
    event = CompactionRequested(request_id, table, DAY, **asked)
    return harness.envelope(harness.codec.encode_compaction_requested(event), key=table)


@pytest.fixture
def gate(harness: Harness) -> Iterator[threading.Event]:
    """Holds every merge of table "slow" on its worker until set (set at the end, so no worker
    is left waiting)."""
    held = harness.store.gates["slow"] = threading.Event()
    yield held
    held.set()


def running_merge(harness: Harness, handler: BatchHandler) -> str:
    """Three loads of "slow", whose minor merge starts and is held: its plan id."""
    handler.process(three_loads(harness, "slow"))
    until(lambda: len(harness.store.entered) == 1)
    plan_id = harness.store.entered[0]
    assert (
        plan_id
        == make_plan(
            "slow", "minor", [harness.day(i, sid=f"slow{i}", table="slow") for i in range(3)]
        ).plan_id
    )
    return plan_id


def cancel_and_retry(harness: Harness, handler: BatchHandler, plan_id: str, request_id: str) -> timedelta:
    """Cancel the running merge, let its cool-down pass and wait for it to start (and be held)
    again; how long it cooled."""
    entered = len(harness.store.entered)
    handler.process([request(harness, request_id=request_id, cancel_plan=plan_id)])
    assert handler.catalog.quarantined("slow") is None
    ((_, until_at),) = handler.planner.cool_down.cooling("slow")
    cooled = until_at - harness.clock.now
    harness.clock.now = until_at + timedelta(seconds=1)
    handler.tick()
    until(lambda: harness.store.entered == [plan_id] * (entered + 1))
    return cooled


def test_a_cancelled_merge_is_reported_failed_freed_and_merges_after_its_cool_down(
    harness: Harness, gate: threading.Event
) -> None:
    handler = harness.handler(config(), thread_workers(2))
    plan_id = running_merge(harness, handler)

    handler.process([request(harness, cancel_plan=plan_id)])
    assert harness.store.cancelled == [plan_id], "its Spark jobs cancelled, its commit fenced"
    assert harness.statuses() == [MergeStatus.FAILED], "reported in the batch that asked"
    assert harness.results()[0]["error"] == "MergeCancelled: cancelled by an operator (request r-cancel)"
    assert harness.results()[0]["plan_id"] == plan_id
    stats = handler.stats
    assert (stats.cancelled_merges, stats.failed_merges, stats.merges) == (1, 1, 0)
    sample = handler.metrics.registry.get_sample_value
    assert sample("compactor_merges_cancelled_total", {"table": "slow"}) == 1
    assert handler.merges.running() == 0 and handler.merges.inflight.free_slots() == 1, "its slot is free"
    ((key, until_at),) = handler.planner.cool_down.cooling("slow")
    assert (key, until_at - harness.clock.now) == (plan_id, timedelta(seconds=60)), "one cool-down"
    assert harness.dead() == []

    gate.set()  # the cancelled worker wakes up: its attempt is fenced, what it reports ignored
    time.sleep(0.2)
    handler.tick()
    assert plan_id not in harness.store.calls, "the cancelled attempt committed nothing"
    assert harness.statuses() == [MergeStatus.FAILED]

    harness.clock.now += timedelta(seconds=30)  # still cooling: not tried again yet
    handler.process([])
    handler.tick()
    assert harness.store.entered == [plan_id]
    harness.clock.now += timedelta(seconds=31)  # its cool-down ends: the same plan comes back
    handler.tick()
    until(lambda: harness.statuses() == [MergeStatus.FAILED, MergeStatus.SUCCEEDED], handler)
    assert harness.results()[1]["plan_id"] == plan_id
    assert harness.store.calls == [plan_id] and handler.stats.merges == 1, "committed afresh, once"


def test_cancels_neither_lengthen_the_cool_down_nor_quarantine_the_table(
    harness: Harness, gate: threading.Event
) -> None:
    """With quarantine after two failures in a row, two hung merges would quarantine the table;
    two cancels in a row leave it merging, each cooling one period."""
    # a cancelled merge's worker waits at the gate until the end: one thread per attempt
    handler = harness.handler(config(quarantine_after=2), thread_workers(3))
    plan_id = running_merge(harness, handler)
    cool_downs = [cancel_and_retry(harness, handler, plan_id, f"r{n}") for n in range(2)]
    assert cool_downs == [timedelta(seconds=60), timedelta(seconds=60)]
    assert handler.planner.cool_down.streak("slow") == 0
    assert handler.stats.quarantined_attempts == 0
    gate.set()
    until(lambda: harness.statuses()[-1:] == [MergeStatus.SUCCEEDED], handler)
    assert harness.statuses() == [MergeStatus.FAILED, MergeStatus.FAILED, MergeStatus.SUCCEEDED]


def test_a_disabled_tables_cancelled_merge_does_not_come_back(
    harness: Harness, gate: threading.Event
) -> None:
    """What the docs tell an operator to do to stop a merge for good: disable, then cancel."""
    handler = harness.handler(config(), thread_workers(2))
    plan_id = running_merge(harness, handler)
    handler.process([request(harness, request_id="off", merging=False)])
    assert handler.merges.running() == 1, "turning merging off lets a running merge finish"
    handler.process([request(harness, cancel_plan=plan_id)])
    assert harness.statuses() == [MergeStatus.FAILED]
    gate.set()
    harness.clock.now += timedelta(minutes=10)
    handler.tick()
    handler.settle(timeout=10)
    assert harness.store.entered == [plan_id] and harness.statuses() == [MergeStatus.FAILED]


def test_a_cancel_that_finds_no_such_merge_changes_nothing(
    harness: Harness, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    harness.store.create("other")
    handler = harness.handler(config(), thread_workers(2))
    plan_id = running_merge(harness, handler)
    with caplog.at_level(logging.INFO, logger="compactor.stream.handler"):
        handler.process(
            [
                request(harness, cancel_plan=OTHER_PLAN),  # nothing runs under that id
                request(harness, table="other", cancel_plan=plan_id),  # it runs, for another table
            ]
        )
    assert harness.store.cancelled == [] and harness.results() == [] and harness.dead() == []
    assert handler.merges.running("slow") == 1, "the running merge runs on"
    assert handler.planner.cool_down.cooling("slow") == []
    assert [r.getMessage() for r in caplog.records if "nothing cancelled" in r.getMessage()] == [
        f"table slow: no merge runs under plan {OTHER_PLAN} here, nothing cancelled (request r-cancel): "
        "it may have finished, or not have started yet",
        f"table other: no merge runs under plan {plan_id} here, nothing cancelled (request r-cancel): "
        "it may have finished, or not have started yet",
    ]
    gate.set()
    until(lambda: harness.statuses() == [MergeStatus.SUCCEEDED], handler)


@pytest.mark.parametrize(
    ("asked", "named"),
    [
        ({"rule": "minor"}, "rule='minor'"),
        ({"segment_ids": ("slow0", "slow1")}, "segment_ids=['slow0', 'slow1']"),
        ({"delete_sub_partition": "eu"}, "delete_sub_partition='eu'"),
        ({"merging": False}, "merging=False"),
    ],
)
def test_a_cancel_that_asks_for_anything_else_is_dead_lettered_whole(
    harness: Harness, gate: threading.Event, asked: dict[str, Any], named: str
) -> None:
    handler = harness.handler(config(), thread_workers(2))
    plan_id = running_merge(harness, handler)
    handler.process([request(harness, request_id="r-mixed", cancel_plan=plan_id, **asked)])
    assert harness.dead() == [
        (
            "invalid_value",
            f"request r-mixed for table slow: cancel_plan={plan_id!r} comes with {named}; a cancel "
            "names the plan to cancel and nothing else",
        )
    ]
    assert harness.store.cancelled == [] and handler.merges.running("slow") == 1, "nothing was cancelled"
    assert handler.catalog.merging_enabled("slow"), "nor anything else done"


def test_a_cancel_naming_no_plan_id_is_dead_lettered(harness: Harness, gate: threading.Event) -> None:
    handler = harness.handler(config(), thread_workers(2))
    running_merge(harness, handler)
    handler.process([request(harness, cancel_plan="slow0")])
    assert harness.dead() == [
        (
            "invalid_value",
            "plan id 'slow0' is invalid: a plan id is 24 lowercase hex digits (a MergeResult's plan_id)",
        )
    ]
    assert handler.merges.running("slow") == 1

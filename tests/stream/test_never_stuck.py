"""Never stuck, and saying why (against the in-memory store): a merge that hangs past its time
bound is cancelled, its slot freed and the plan tried again after a cool-down that grows with
each failure in a row; a table whose merges keep failing is quarantined with its last error while
the others merge on, and its config changing or an operator enabling it releases it."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from compactor.catalog.changes import SegmentAdded
from compactor.catalog.fold import SegmentCatalog
from compactor.domain.events import MergeStatus
from compactor.domain.plans import make_plan
from compactor.job.ticker import Ticker
from compactor.job.wiring import bytes_read
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


def test_a_hung_merges_thread_is_replaced_and_the_merges_behind_it_run_on(harness: Harness) -> None:
    """One thread for one slot: the hung merge's thread never comes back, yet the next merge
    runs on a thread that took its place, and is not cancelled as hung for its wait."""
    hang = harness.store.gates["slow"] = threading.Event()
    cfg = config(max_concurrent_merges=1, merge_timeout_floor="1s", merge_timeout="1s")
    workers = thread_workers(1)
    handler = harness.handler(cfg, workers)
    handler.process(three_loads(harness, "slow"))
    until(lambda: len(harness.store.entered) == 1)
    time.sleep(1.2)
    handler.tick()
    until(lambda: harness.statuses() == [MergeStatus.FAILED], handler)
    assert (workers.live(), workers.written_off()) == (1, 1), "a new thread took the hung one's place"
    handler.process(three_loads(harness, "good"))
    until(lambda: MergeStatus.SUCCEEDED in harness.statuses(), handler)
    assert [r["table"] for r in harness.results() if r["status"] is MergeStatus.SUCCEEDED] == ["good"]
    assert handler.stats.cancelled_merges == 1, "only the hung merge was cancelled"
    hang.set()  # the hung thread comes back: it ends, the pool is its size again
    until(lambda: workers.written_off() == 0)
    assert workers.live() == 1
    workers.shutdown()


def test_a_merge_waiting_for_a_thread_is_not_timed(harness: Harness) -> None:
    """A merge's time bound counts from when a worker begins it: queued behind a long merge on
    the one thread (two slots), it is not cancelled however long it waits."""
    hold = harness.store.gates["long"] = threading.Event()
    cfg = config(max_concurrent_merges=2, merge_timeout_floor="1s", merge_timeout="1s")
    workers = thread_workers(1)
    handler = harness.handler(cfg, workers)
    handler.process(three_loads(harness, "long") + three_loads(harness, "queued"))
    until(lambda: len(harness.store.entered) == 1)
    assert handler.merges.running() == 2, "both hold a slot; one waits for the thread"
    time.sleep(0.6)
    hold.set()  # the first ends within its bound; the second begins only now
    until(lambda: harness.statuses().count(MergeStatus.SUCCEEDED) == 2, handler)
    time.sleep(0.6)  # 1.2 s after it was submitted, 0.6 s after it began
    handler.tick()
    assert handler.stats.cancelled_merges == 0
    workers.shutdown()


def test_an_upsert_merge_is_bounded_by_the_table_it_reads_not_its_inputs(harness: Harness) -> None:
    """Upsert compaction judges its inputs against every row of the table: its time bound grows
    with the table, or a large upsert table's merges are cancelled again and again."""
    gib = 1 << 30
    segments = [replace(harness.day(i), bytes=gib) for i in range(8)]
    catalog = SegmentCatalog()
    for segment in segments:
        catalog.apply(SegmentAdded(segment))
    upsert = make_plan("t", "upsert_compaction", segments[:2])
    minor = make_plan("t", "minor", segments[:2])
    assert (bytes_read(catalog, upsert), bytes_read(catalog, minor)) == (8 * gib, 2 * gib)


def test_hung_merges_are_cancelled_and_tables_attempted_while_upkeep_hangs(harness: Harness) -> None:
    """The watchdog and the ticks run on threads of their own: a key index snapshot or a purge
    that hangs (upkeep) holds up neither the cancel of a hung merge nor the next merge."""
    hang = harness.store.gates["slow"] = threading.Event()
    cfg = config(max_concurrent_merges=1, merge_timeout_floor="1s", merge_timeout="1s")
    handler = harness.handler(cfg, thread_workers(1))
    upkeep_stuck = threading.Event()
    handler.upkeep = lambda: upkeep_stuck.wait(30)  # type: ignore[method-assign]
    ticker = Ticker(handler, every=0.1, watch_every=0.1).start()
    try:
        handler.process(three_loads(harness, "slow"))
        until(lambda: harness.statuses() == [MergeStatus.FAILED])  # no test ticks: the job's threads
        handler.process(three_loads(harness, "good"))
        until(lambda: MergeStatus.SUCCEEDED in harness.statuses())
        assert ticker.running()
    finally:
        ticker.close(timeout=1)
        upkeep_stuck.set()
        hang.set()


def test_a_table_whose_merge_kills_the_job_again_and_again_is_quarantined(harness: Harness) -> None:
    """A merge that crashes the driver (out of memory) reports nothing; its table's streak is
    kept with the catalog, so each restart counts the merge the last run died in, and the crash
    loop ends in quarantine. A success in between forgives it."""
    cfg = config(quarantine_after=3)
    loads = three_loads(harness, "oom")
    plan_id = make_plan(
        "oom", "minor", [harness.day(i, sid=f"oom{i}", table="oom") for i in range(3)]
    ).plan_id
    harness.store.gates[plan_id] = threading.Event()  # the merge runs until the "crash"
    handler = harness.handler(cfg, thread_workers(1))
    handler.process(loads)
    for restart in range(1, 4):
        until(lambda n=restart: harness.store.entered.count(plan_id) == n)  # type: ignore[misc]
        handler.keeper.save()  # what a batch saves before the merge kills the job
        handler = harness.handler(cfg, thread_workers(1))  # the next run, the merge never reported
        harness.clock.now += timedelta(hours=2)  # past any cool-down
        if restart < 3:
            assert handler.catalog.quarantined("oom") is None
            assert handler.planner.cool_down.streak("oom") == restart
            handler.process([])
            handler.tick()
    note = handler.catalog.quarantined("oom")
    assert note is not None and "the job stopped while plan" in quarantine_error(note)[0]
    harness.store.gates[plan_id].set()


def test_a_merge_that_committed_before_the_job_died_is_no_failure_of_its_table(harness: Harness) -> None:
    """The job died after the merge's commit, before the batch saved its end: the restart finds
    the commit in the log, so the merge did not die with the job (found by bench/years.py, where
    such merges grew the streak of tables that had failed nothing)."""
    cfg = config(quarantine_after=1)
    loads = three_loads(harness, "ok")
    plan_id = make_plan("ok", "minor", [harness.day(i, sid=f"ok{i}", table="ok") for i in range(3)]).plan_id
    harness.store.after_gates[plan_id] = threading.Event()  # committed; the job "dies" right after
    handler = harness.handler(cfg, thread_workers(1))
    handler.process(loads)
    until(lambda: harness.store.committed_version("ok", plan_id) is not None)
    handler.keeper.save()  # the begun mark is durable, the outcome never is
    again = harness.handler(cfg, thread_workers(1))
    assert again.catalog.quarantined("ok") is None
    assert again.planner.cool_down.streak("ok") == 0
    assert again.catalog.failures("ok") == ()
    assert harness.statuses() == [MergeStatus.SUCCEEDED], "the restart announced the commit"
    third = harness.handler(cfg, thread_workers(1))  # again before a batch saved: the log tells
    assert third.planner.cool_down.streak("ok") == 0 and third.catalog.failures("ok") == ()
    harness.store.after_gates[plan_id].set()


def test_a_merge_fenced_by_a_lost_shard_is_no_failure_of_its_table(harness: Harness) -> None:
    """A lost shard's merges end uncommitted and its next holder plans them: that is the shard's
    lot, not the table's (found by bench/years.py, where a paused job quarantined a healthy table
    on its way out)."""
    handler = harness.handler(config(quarantine_after=1))
    harness.store.fence()
    handler.process(three_loads(harness, "a"))
    assert harness.statuses() == [MergeStatus.SKIPPED]
    assert handler.catalog.quarantined("a") is None
    assert handler.planner.cool_down.streak("a") == 0
    assert handler.stats.failed_merges == 0


def test_a_success_ends_a_kept_streak(harness: Harness) -> None:
    cfg = config(quarantine_after=5)
    loads, plan_id = failing_loads(harness, ValueError("boom"))
    handler = harness.handler(cfg)
    handler.process(loads)
    assert handler.planner.cool_down.streak("bad") == 1
    handler.keeper.save()
    again = harness.handler(cfg)
    assert again.planner.cool_down.streak("bad") == 1, "the streak outlives the restart"
    del harness.store.failures[plan_id]
    harness.clock.now += timedelta(hours=1)
    again.process([])
    again.tick()
    assert MergeStatus.SUCCEEDED in harness.statuses()
    again.keeper.save()
    third = harness.handler(cfg)
    assert third.planner.cool_down.streak("bad") == 0
    assert third.catalog.failures("bad")[0].streak == 0


def test_a_table_no_merge_can_rewrite_is_quarantined_before_its_first_merge(harness: Harness) -> None:
    """A liquid-clustered table: one line, quarantined with why, no merge tried; a table checked
    once is not asked again."""
    harness.store.refused["clustered"] = "clustering (liquid clustering): compacted tables are partitioned"
    handler = harness.handler(config(quarantine_after=5))
    handler.process(three_loads(harness, "clustered") + three_loads(harness, "plain"))
    note = handler.catalog.quarantined("clustered")
    assert note is not None
    assert quarantine_error(note)[0].startswith("UnsupportedTableFeature: clustering (liquid clustering)")
    assert [r["table"] for r in harness.results()] == ["plain"], "no merge of it was tried"
    assert handler.catalog.quarantined("plain") is None


def test_merges_of_a_table_that_fail_side_by_side_count_once_in_its_streak(harness: Harness) -> None:
    """Three merges of one table hit one fault together: one failure in a row, not three, so the
    table is not quarantined before any retry; tries that fail one after another still are."""
    handler = harness.handler(config(quarantine_after=3, max_concurrent_merges=3), thread_workers(3))
    harness.store.create("bad")
    days = [harness.day(i, sid=f"bad{i}", table="bad") for i in range(9)]
    plan_ids = [make_plan("bad", "minor", days[i : i + 3]).plan_id for i in (0, 3, 6)]
    for plan_id in plan_ids:
        harness.store.failures[plan_id] = OSError("the store stalled")
    gate = harness.store.gates["bad"] = threading.Event()
    handler.process(harness.loaded(*days))
    until(lambda: len(harness.store.entered) == 3)  # all three in flight at once
    gate.set()
    until(lambda: harness.statuses().count(MergeStatus.FAILED) == 3, handler)
    cool_down = handler.planner.cool_down
    assert cool_down.streak("bad") == 1, "they ran beside one another: one failure in a row"
    assert handler.catalog.quarantined("bad") is None
    assert handler.stats.failed_merges == 3

    harness.clock.now += timedelta(hours=1)  # every cool-down over: the second try fails
    handler.process([])
    handler.tick()
    until(lambda: cool_down.streak("bad") == 2, handler)
    assert handler.catalog.quarantined("bad") is None
    harness.clock.now += timedelta(hours=1)  # and the third
    handler.process([])
    handler.tick()
    until(lambda: handler.catalog.quarantined("bad") is not None, handler)
    note = handler.catalog.quarantined("bad")
    assert note is not None and quarantine_error(note)[0] == "OSError: the store stalled"

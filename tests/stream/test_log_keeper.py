"""Checkpoints off the merge path (against the in-memory store): the upkeep writes a table's
checkpoint once its log holds more than `checkpoint_every` commits since the last, whoever
wrote them, the most behind first and within a budget; a merge never waits for one."""

from __future__ import annotations

import threading
from typing import Any

from compactor.job.ticker import Ticker
from compactor.stream.log_keeper import LogKeeper
from compactor.stream.reporting import NoMetrics
from tests.helpers.harness import Harness, between_batches
from tests.helpers.memory_store import InMemoryTableStore
from tests.stream.test_concurrency import until

MINOR = {"rule": "minor", "level_thresholds": [2, 0]}


def config(every: int) -> dict[str, Any]:
    return {"defaults": {"rules": [MINOR], "checkpoint_every": every}}


def test_a_table_past_its_interval_gets_a_checkpoint_from_the_upkeep_not_from_a_merge(
    harness: Harness,
) -> None:
    handler = harness.handler(config(3))
    handler.process(harness.loaded(*(harness.day(i) for i in range(4))))  # 4 loads, 2 merges
    assert harness.store.checkpointed == [], "the batch and its merges wrote none"
    latest = harness.store.latest_version("t")
    assert latest > 3
    between_batches(handler)
    assert harness.store.checkpointed == [("t", latest)]
    assert handler.logs is not None and handler.logs.facts()["t"].commits_since_checkpoint == 0
    between_batches(handler)
    assert len(harness.store.checkpointed) == 1, "not again until 3 more commits"


def test_the_most_behind_go_first_within_the_budget_and_the_rest_next_round() -> None:
    now = [0.0]

    class SlowCheckpoints(InMemoryTableStore):
        def checkpoint(self, table: str) -> int:
            now[0] += 3.0  # a checkpoint takes 3 s: past the round's budget of 2.5 s
            return super().checkpoint(table)

    store = SlowCheckpoints()
    for table, commits in (("a", 5), ("b", 30), ("c", 12)):
        store.create(table)
        store.commits[table] = [None] * commits  # type: ignore[list-item]
    keeper = LogKeeper(store, lambda table: 10, NoMetrics(), budget=2.5, clock=lambda: now[0])
    versions = {t: store.latest_version(t) for t in "abc"}
    assert keeper.keep(versions) == ["b"], "b first (30 behind), then the budget ran out"
    assert keeper.keep(versions) == ["c"]
    assert keeper.keep(versions) == [] and keeper.written == 2 and keeper.most_behind == 30


def test_another_writers_checkpoint_is_taken_as_it_is() -> None:
    store = InMemoryTableStore()
    store.create("t")
    store.commits["t"] = [None] * 20  # type: ignore[list-item]
    keeper = LogKeeper(store, lambda table: 10, NoMetrics())
    store.checkpoints["t"] = 15  # written by someone else since the keeper last looked
    keeper._checkpointed["t"] = 0
    assert keeper.keep({"t": 19}) == []
    assert keeper.facts()["t"].commits_since_checkpoint == 4


def test_checkpoints_are_written_while_a_batch_holds_the_jobs_lock(harness: Harness) -> None:
    """bench/years.py found no checkpoint written in 26 minutes of steady load: the upkeep
    waited for the job's lock, which the batches and the ticker held nearly all the time. The
    log upkeep takes the tables' versions without it, on a thread of its own."""
    handler = harness.handler(config(3))
    handler.process(harness.loaded(*(harness.day(i) for i in range(4))))
    latest = harness.store.latest_version("t")
    held, release = threading.Event(), threading.Event()

    def batch_holding_the_lock() -> None:
        with handler.lock:
            held.set()
            release.wait(10)

    batch = threading.Thread(target=batch_holding_the_lock, daemon=True)
    batch.start()
    held.wait(5)
    ticker = Ticker(handler, every=0.05, watch_every=0.05).start()
    try:
        until(lambda: harness.store.checkpointed == [("t", latest)])
        assert batch.is_alive(), "written while the lock was held"
    finally:
        release.set()
        ticker.close(timeout=5)
        batch.join(5)


def test_a_held_interval_is_raised_before_the_first_checkpoint_and_given_back_when_turned_off() -> None:
    store = InMemoryTableStore()
    for table in ("held", "plain"):
        store.create(table)
        store.commits[table] = [None] * 12  # type: ignore[list-item]
    order: list[str] = []
    holding = {"held": True, "plain": False}
    real_hold, real_checkpoint = store.hold_checkpoint_interval, store.checkpoint
    store.hold_checkpoint_interval = lambda t, h: order.append(f"hold {t} {h}") or real_hold(t, h)  # type: ignore[method-assign]
    store.checkpoint = lambda t: order.append(f"checkpoint {t}") or real_checkpoint(t)  # type: ignore[method-assign]
    keeper = LogKeeper(store, lambda table: 10, NoMetrics(), hold=lambda table: holding[table])

    assert sorted(keeper.keep({"held": 11, "plain": 11})) == ["held", "plain"]
    assert order.index("hold held True") < order.index("checkpoint held"), "raised first"
    assert "hold plain False" not in order, "a table never held is not read for it"
    assert store.held_intervals == {"held": True}
    order.clear()
    assert keeper.keep({"held": 11, "plain": 11}) == [] and order == [], "once"

    holding["held"] = False  # the table's config turned it off while the job runs
    keeper.keep({"held": 11, "plain": 11})
    assert order == ["hold held False"] and store.held_intervals == {"held": False}


def test_a_failed_hold_is_tried_again_next_round_and_the_checkpoint_still_written() -> None:
    store = InMemoryTableStore()
    store.create("t")
    store.commits["t"] = [None] * 12  # type: ignore[list-item]
    failures = [OSError("s3a://w/t/_delta_log: connection refused")]

    def hold(table: str, held: bool) -> bool:
        if failures:
            raise failures.pop()
        return InMemoryTableStore.hold_checkpoint_interval(store, table, held)

    store.hold_checkpoint_interval = hold  # type: ignore[method-assign]
    keeper = LogKeeper(store, lambda table: 10, NoMetrics(), hold=lambda table: True)
    assert keeper.keep({"t": 11}) == ["t"], "Delta's interval stands meanwhile: the log is kept small"
    assert store.held_intervals == {}
    keeper.keep({"t": 11})
    assert store.held_intervals == {"t": True}

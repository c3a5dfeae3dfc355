"""`InFlight` under random starts and finishes: no segment in two merges at once, slots and pool
limits kept, a table-wide rewrite alone in its table, and each table's results in commit order."""

from __future__ import annotations

import functools
import gc
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from itertools import combinations, cycle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.domain.plans import Commit, MergePlan, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.stream.merging.inflight import InFlight
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.workers import Finished, InlineWorkers, MergeThreads, SharedWorkers

T0 = datetime(2024, 1, 1, tzinfo=UTC)
POOL_CAPS = {"p1": 1, "p2": 2}


class ManualWorkers:
    """Workers whose jobs commit, and later report, when the test says."""

    def __init__(self) -> None:
        self.pending: list[tuple[Future[Finished], Callable[[], Finished]]] = []
        self.committed: list[tuple[Future[Finished], Finished]] = []

    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]:
        future: Future[Finished] = Future()
        self.pending.append((future, fn))
        return future

    def run(self, index: int) -> None:
        future, fn = self.pending.pop(index)
        self.committed.append((future, fn()))

    def report(self, index: int) -> None:
        future, finished = self.committed.pop(index)
        future.set_result(finished)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def segment(table: str, n: int) -> Segment:
    start = T0 + timedelta(days=n)
    return Segment(f"{table}-{n}", table, TimeRange(start, start + timedelta(days=1)), start, 1)


@st.composite
def plans(draw: st.DrawFn) -> tuple[MergePlan, str | None]:
    table = draw(st.sampled_from(["a", "b"]))
    ids = draw(st.sets(st.integers(0, 5), min_size=2, max_size=3))
    plan = make_plan(table, "minor", [segment(table, n) for n in sorted(ids)])
    if draw(st.integers(0, 9)) == 0:
        plan = MergePlan(plan.plan_id + "w", plan.table, plan.rule, plan.inputs, plan.output, table_wide=True)
    return plan, draw(st.sampled_from([None, "p1", "p2"]))


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), plans()),
        st.tuples(st.sampled_from(["run", "report"]), st.integers(0, 7)),
    )
)


def check(inflight: InFlight, limit: int) -> None:
    running = inflight._running.values()
    assert len(running) <= limit
    for pool, cap in POOL_CAPS.items():
        assert sum(1 for r in running if r.pool == pool) <= cap
    for table in ("a", "b"):
        mine = [r.plan for r in running if r.plan.table == table]
        if any(p.table_wide for p in mine):
            assert len(mine) == 1, "a table-wide rewrite runs alone in its table"
        for p, q in combinations(mine, 2):
            assert not set(p.input_ids) & set(q.input_ids), f"{p.plan_id} and {q.plan_id} share inputs"


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), STEPS)
def test_no_segment_is_in_two_merges_in_flight(limit: int, steps: list[tuple[str, object]]) -> None:
    workers = ManualWorkers()
    versions: dict[str, int] = {}
    inflight = InFlight(workers, Slots(limit, POOL_CAPS.get), lambda table, pid: versions.get(pid))

    def job(plan: MergePlan) -> Callable[[], Finished]:
        def commit() -> Finished:
            versions[plan.plan_id] = len(versions)
            return Finished(plan, Commit(versions[plan.plan_id], (plan.output,), 1, 1))

        return commit

    for kind, arg in steps:
        if kind == "start":
            plan, pool = arg  # type: ignore[misc]
            if inflight.blocked(plan, pool) is None:
                inflight.start(plan, pool, job(plan))
            elif not inflight.running():
                raise AssertionError("with nothing running, every plan can start")
        elif kind == "run" and workers.pending:
            workers.run(int(arg) % len(workers.pending))  # type: ignore[call-overload]
        elif kind == "report" and workers.committed:
            workers.report(int(arg) % len(workers.committed))  # type: ignore[call-overload]
        taken = inflight.take_finished()
        per_table: dict[str, list[int]] = {}
        for f in taken:
            assert f.version is not None
            per_table.setdefault(f.plan.table, []).append(f.version)
        for table, got in per_table.items():
            assert got == sorted(got), f"table {table}'s results out of commit order"
            unreported = [r.plan.plan_id for r in inflight._running.values() if r.plan.table == table]
            assert all(versions.get(p, 10**9) > max(got) for p in unreported), (
                "released before an earlier commit"
            )
        check(inflight, limit)


@pytest.mark.parametrize("limit", [1, 2, 3, 4])
def test_shards_share_the_jobs_slots(limit: int) -> None:
    """Four shards, each on its own thread with its own InFlight, race for one Slots from a
    barrier; their merges run on more worker threads than there are slots. Never more than the
    job's limit nor a pool's cap run at once, the first `limit` merges do run together (the
    slots fill), every plan runs exactly once, and a stopped shard's slots go to the others."""
    shards, per_shard = 4, 12
    workers = MergeThreads(3 * limit + 2)  # enough that only the slots limit
    slots = Slots(limit, POOL_CAPS.get)
    inflights = [
        InFlight(SharedWorkers(workers), slots, lambda table, pid: None, shard=i) for i in range(shards)
    ]
    lock = threading.Lock()
    running: Counter[str | None] = Counter()
    peak: Counter[str | None] = Counter()
    ran: list[str] = []
    # the first `limit` merges wait for each other: they can only all get here if the slots fill
    first_wave = threading.Barrier(limit, timeout=10)

    def merge(plan: MergePlan, pool: str | None) -> Finished:
        with lock:
            ran.append(plan.plan_id)
            first = len(ran) <= limit
            running[pool] += 1
            peak[pool] = max(peak[pool], running[pool])
            peak["all"] = max(peak["all"], running.total())
        if first:
            first_wave.wait()
        else:
            time.sleep(0.001)  # holds its slot while the other shards try for one
        with lock:
            running[pool] -= 1
        return Finished(plan)

    # each shard's tables are its own; no two plans share a segment; each shard starts with a
    # plan of no pool, so whatever order they start in, `limit` merges can run together
    todo = [
        [
            (make_plan(f"s{i}", "minor", [segment(f"s{i}", 2 * k), segment(f"s{i}", 2 * k + 1)]), pool)
            for k, pool in zip(range(per_shard), cycle([None, "p1", "p2"]), strict=False)
        ]
        for i in range(shards)
    ]
    go = threading.Barrier(shards, timeout=10)

    def shard(index: int) -> list[Finished]:
        inflight, mine, finished = inflights[index], list(todo[index]), []
        go.wait()
        deadline = time.monotonic() + 30
        while (mine or inflight.running()) and time.monotonic() < deadline:
            if mine and inflight.start(*mine[0], functools.partial(merge, *mine[0])):
                mine.pop(0)
                continue
            inflight.wait(0.05)
            finished += inflight.take_finished()
        return finished

    with ThreadPoolExecutor(max_workers=shards) as racing:
        finished = [f for done in racing.map(shard, range(shards)) for f in done]
    planned = sorted(plan.plan_id for mine in todo for plan, _ in mine)
    assert [f.failure for f in finished if f.failure is not None] == []
    assert sorted(f.plan.plan_id for f in finished) == planned and sorted(ran) == planned, "each ran once"
    assert peak["all"] == limit, f"at most {limit} merges at once, and the slots filled: {peak}"
    assert peak["p1"] <= POOL_CAPS["p1"] and peak["p2"] <= POOL_CAPS["p2"], peak
    assert slots.free() == limit

    release = threading.Event()

    def held(plan: MergePlan) -> Finished:
        release.wait(10)
        return Finished(plan)

    for k in range(limit):
        plan = make_plan("s0", "minor", [segment("s0", 100 + 2 * k), segment("s0", 101 + 2 * k)])
        assert inflights[0].start(plan, None, functools.partial(held, plan))
    waiting = make_plan("s1", "minor", [segment("s1", 100), segment("s1", 101)])
    assert not inflights[1].start(waiting, None, lambda: Finished(waiting)), "every slot is taken"
    inflights[0].release()  # the shard stopped: its merges' outcomes will never be taken
    assert slots.free() == limit, "a stopped shard's slots go back to the job"
    assert inflights[1].start(waiting, None, lambda: Finished(waiting))
    release.set()
    workers.shutdown(wait=True)


def test_a_released_shard_leaves_nothing_in_the_jobs_slots() -> None:
    """Each shard (re)start adds a waker to the job's slots; a stopped shard's must go, or every
    rejoin, query restart and rebalance keeps an old shard's whole state (its store) alive."""
    slots = Slots(2, lambda pool: None)

    class Store:
        def committed_at(self, table: str, plan_id: str) -> int | None:
            return None

    gone = []
    for shard in range(5):
        store = Store()
        inflight = InFlight(InlineWorkers(), slots, store.committed_at, shard=shard)
        gone.append(weakref.ref(store))
        inflight.release()
        del inflight, store
    gc.collect()
    assert slots.listeners() == 0
    assert [ref() for ref in gone] == [None] * 5, "no stopped shard's store is kept"

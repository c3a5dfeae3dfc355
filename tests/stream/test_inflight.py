"""`InFlight` under random starts and finishes: no segment in two merges at once, slots and pool
limits kept, a table-wide rewrite alone in its table, and each table's results in commit order."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.domain.plans import Commit, MergePlan, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.stream.inflight import Finished, InFlight, SharedWorkers, Slots

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


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.lists(st.tuples(st.sampled_from(["start", "finish"]), plans())))
def test_shards_share_the_jobs_slots(
    limit: int, steps: list[tuple[str, tuple[MergePlan, str | None]]]
) -> None:
    """Two shards' InFlights on one Slots: together they never pass the job's limit or a pool's
    cap, and a stopped shard's merges give their slots back to the other."""
    workers = ManualWorkers()
    slots = Slots(limit, POOL_CAPS.get)
    shards = [InFlight(SharedWorkers(workers), slots, lambda table, pid: None) for _ in range(2)]
    for kind, (plan, pool) in steps:
        inflight = shards[0 if plan.table == "a" else 1]  # a table belongs to one shard
        if kind == "start" and plan.plan_id not in inflight._running:
            if inflight.blocked(plan, pool) is None:
                inflight.start(plan, pool, lambda plan=plan: Finished(plan))  # type: ignore[misc]
        elif kind == "finish" and workers.pending:
            workers.run(0)
            workers.report(0)
            for each in shards:
                each.take_finished()
        running = [r for each in shards for r in each._running.values()]
        assert len(running) <= limit
        assert slots.free() == limit - len(running)
        for pool_name, cap in POOL_CAPS.items():
            assert sum(1 for r in running if r.pool == pool_name) <= cap
    shards[0].release()
    assert slots.free() == limit - len(shards[1]._running), "a stopped shard's slots go back to the job"

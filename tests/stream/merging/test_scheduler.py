"""The merge scheduler with a fake desk and real worker threads: outcomes announced in each
table's commit order whatever order the workers finish in, a stale plan owes its table one more
attempt, a held table's waiting plans are dropped, an outcome Kafka refuses stays first in line,
a hung merge is cancelled and reported failed, an operator's cancel fails the merge it names
and no other, a merge that reported before its cancel keeps its outcome, a cancelled attempt
returning late does not speak for the plan's retry, the per-round limit and an operator's
request, and a draining scheduler starts nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from compactor.domain.plans import Commit, MergePlan
from compactor.errors import DeliveryError, MergeCancelled
from compactor.stream.merging.inflight import InFlight
from compactor.stream.merging.scheduler import MergeScheduler
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.waiting import WaitingPlans
from compactor.stream.merging.workers import Finished, InlineWorkers, MergeThreads, Workers
from tests.stream.merging.test_slots import plan


@dataclass(frozen=True)
class Noted:
    """What the fake desk records of a finished merge (`merging.Recorded`)."""

    plan_id: str
    stale: bool = False
    held: bool = False


@dataclass
class Desk:
    """Runs each plan as `behaviour` says and writes down what the scheduler asked."""

    behaviour: dict[str, Callable[[MergePlan], Finished]] = field(default_factory=dict)
    hold: set[str] = field(default_factory=set)  # plan ids whose recording quarantines their table
    refuse: int = 0  # announcements Kafka refuses before it accepts again
    recorded: list[str] = field(default_factory=list)
    announced: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished: list[Finished] = field(default_factory=list)  # what each record was handed
    began: list[str] = field(default_factory=list)

    def pool(self, plan: MergePlan) -> str | None:
        return None

    def job(self, plan: MergePlan) -> Callable[[], Finished]:
        run = self.behaviour.get(plan.plan_id, lambda p: Finished(p, commit=commit(p, 1)))
        return lambda: run(plan)

    def started(self, plan: MergePlan) -> None:
        self.began.append(plan.plan_id)

    def record(self, finished: Finished) -> Noted:
        self.finished.append(finished)
        self.recorded.append(finished.plan.plan_id)
        return Noted(
            finished.plan.plan_id,
            stale=finished.stale is not None,
            held=finished.plan.plan_id in self.hold,
        )

    def announce(self, outcome: Noted) -> None:
        if self.refuse:
            self.refuse -= 1
            raise DeliveryError("the broker refused")
        self.announced.append(outcome.plan_id)

    def cancel(self, plan: MergePlan, why: str) -> None:
        self.cancelled.append(plan.plan_id)


@dataclass
class Activity:
    running: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)

    def on_started(self, table: str) -> None:
        self.running[table] = self.running.get(table, 0) + 1

    def on_finished(self, table: str) -> None:
        self.running[table] -= 1

    def on_waiting(self, reasons: dict[str, str]) -> None:
        self.waiting = reasons


def commit(p: MergePlan, version: int) -> Commit:
    return Commit(version, (p.output,), 2, 2)


def scheduler(
    desk: Desk,
    workers: Workers | None = None,
    slots: int = 4,
    per_round: int | None = None,
    committed_at: Callable[[str, str], int | None] = lambda table, plan_id: None,
    bound: float = 3600.0,
) -> tuple[MergeScheduler[Noted], Activity]:
    activity = Activity()
    inflight = InFlight(workers or InlineWorkers(), Slots(slots, lambda pool: None), committed_at)
    waiting = WaitingPlans(lambda table: 1.0, per_round)
    return MergeScheduler(inflight, waiting, desk, activity, lambda size: bound), activity


def no_replan(table: str) -> None:
    raise AssertionError(f"table {table} was not owed an attempt")


def advance(
    merges: MergeScheduler[Noted], replan: Callable[[str], None] = no_replan, limit: int | None = None
) -> bool:
    """One turn, as the batch handler takes it: each table handed back is attempted."""
    turn = merges.turn(limit)
    while owed := merges.advance(turn):
        for table in owed:
            replan(table)
    return turn.happened


def test_outcomes_are_announced_in_each_tables_commit_order_whatever_order_workers_finish() -> None:
    """The first merge commits (version 4) and its worker is held before it reports; the second
    commits later (version 5) and reports first: it is held back until the first reports."""
    first, second, gate = plan("t", 0), plan("t", 1), threading.Event()
    desk = Desk(
        {
            first.plan_id: lambda p: (gate.wait(10), Finished(p, commit=commit(p, 4)))[1],
            second.plan_id: lambda p: Finished(p, commit=commit(p, 5)),
        }
    )
    # the first's commit is in the table (version 4) while its worker has not reported
    in_table = lambda table, plan_id: 4 if plan_id == first.plan_id else None  # noqa: E731
    with MergeThreads(2) as pool:
        merges, activity = scheduler(desk, pool, committed_at=in_table)
        merges.offer("t", [first, second])
        for _ in range(10):
            merges.wait(0.05)
            advance(merges)
        assert desk.recorded == [] and merges.running("t") == 2, "the later commit waits for the first"
        gate.set()
        while merges.running():
            merges.wait(0.05)
            advance(merges)
    assert desk.announced == [first.plan_id, second.plan_id]
    assert activity.running == {"t": 0}


def test_a_stale_plan_owes_its_table_one_attempt_per_advance() -> None:
    stale = plan("t", 0)
    desk = Desk({stale.plan_id: lambda p: Finished(p, stale="inputs changed")})
    merges, _ = scheduler(desk)
    attempts: list[str] = []

    def replan(table: str) -> None:  # the table's new attempt makes the same plan, stale again
        attempts.append(table)
        merges.offer(table, [stale])

    merges.offer("t", [stale])
    assert advance(merges, replan)
    assert attempts == ["t"], "one re-plan in this advance, though the new plan went stale too"
    assert desk.announced == [stale.plan_id, stale.plan_id], "each outcome is announced"
    advance(merges, replan)
    assert attempts == ["t", "t"], "the next advance owes it again"


def test_a_held_tables_waiting_plans_are_dropped_and_other_tables_go_on() -> None:
    held, queued, other = plan("t", 0), plan("t", 1), plan("u", 0)
    desk = Desk(hold={held.plan_id})
    merges, _ = scheduler(desk, slots=1, per_round=1)
    merges.offer("t", [held, queued])
    merges.offer("u", [other])
    assert advance(merges, limit=1)
    assert held.plan_id in desk.recorded
    assert merges.waiting.waiting("t") == [], "t's queued plan would fail as its first did"
    advance(merges)
    assert sorted(desk.announced) == sorted([held.plan_id, other.plan_id])
    assert queued.plan_id not in desk.recorded


def test_an_outcome_kafka_refuses_stays_first_in_line() -> None:
    a, b = plan("t", 0), plan("u", 0)
    desk = Desk(refuse=1)
    merges, _ = scheduler(desk)
    with pytest.raises(DeliveryError):
        merges.offer("t", [a])
    assert desk.announced == []
    merges.offer("u", [b])
    assert desk.announced == [a.plan_id, b.plan_id], "the refused one first, then the next"


def test_a_merge_past_its_time_bound_is_cancelled_freed_and_reported_failed() -> None:
    hung, gate = plan("t", 0), threading.Event()

    def hang(p: MergePlan) -> Finished:
        gate.wait(10)
        return Finished(p, commit=commit(p, 9))  # too late: its outcome is ignored

    desk = Desk({hung.plan_id: hang})
    with MergeThreads(1) as pool:
        merges, _ = scheduler(desk, pool, slots=1, bound=0.0)
        merges.offer("t", [hung])
        assert merges.running() == 1
        begun(merges)
        assert merges.cancel_hung() == [hung]
        assert desk.cancelled == [hung.plan_id]
        advance(merges)
        assert merges.running() == 0 and merges.inflight.free_slots() == 1
        gate.set()
    advance(merges)
    assert desk.recorded == [hung.plan_id], "recorded once, as failed"
    assert merges.cancel_hung() == []


def test_a_cancelled_merge_is_reported_as_a_merge_cancelled_failure() -> None:
    hung, gate = plan("t", 0), threading.Event()
    desk = Desk({hung.plan_id: lambda p: (gate.wait(10), Finished(p))[1]})
    seen = desk.finished
    with MergeThreads(1) as pool:
        merges, _ = scheduler(desk, pool, bound=0.0)
        merges.offer("t", [hung])
        begun(merges)
        merges.cancel_hung()
        advance(merges)
        gate.set()
    assert len(seen) == 1 and isinstance(seen[0].failure, MergeCancelled)
    assert "past its bound of 0s" in str(seen[0].failure)


def test_an_operators_cancel_fails_the_merge_it_names_and_no_other() -> None:
    mine, other, gate = plan("t", 0), plan("u", 0), threading.Event()

    def held(p: MergePlan) -> Finished:
        gate.wait(10)
        return Finished(p, commit=commit(p, 9))

    desk = Desk({mine.plan_id: held, other.plan_id: held})
    seen = desk.finished
    with MergeThreads(2) as pool:
        merges, _ = scheduler(desk, pool, slots=2)
        merges.offer("t", [mine])
        merges.offer("u", [other])
        assert merges.cancel("0" * 24, "why") is None, "no merge runs under that id"
        assert merges.cancel(mine.plan_id, "why", table="u") is None, "it runs, for another table"
        assert desk.cancelled == [] and merges.running() == 2
        why = "cancelled by an operator (request r1)"
        assert merges.cancel(mine.plan_id, why, table="t") == mine
        assert desk.cancelled == [mine.plan_id]
        assert merges.cancel(mine.plan_id, why) is None, "cancelled once"
        advance(merges)
        assert merges.running() == 1 and merges.running("u") == 1
        assert merges.inflight.free_slots() == 1, "its slot is free"
        assert len(seen) == 1 and isinstance(seen[0].failure, MergeCancelled)
        assert str(seen[0].failure) == why and seen[0].failure.by_operator
        gate.set()
        while merges.running():
            merges.wait(0.05)
            advance(merges)
    assert desk.recorded == [mine.plan_id, other.plan_id], "each recorded once"
    assert seen[1].commit is not None, "the other merge committed"


@pytest.mark.parametrize("cancel", ["operator", "hung"])
def test_a_merge_that_reported_before_its_cancel_keeps_its_outcome(cancel: str) -> None:
    """The worker reported its commit, and the state's thread has not taken it yet: a cancel
    then must not turn the commit into a failure."""
    done, gate = plan("t", 0), threading.Event()

    def reports(p: MergePlan) -> Finished:
        gate.wait(10)
        return Finished(p, commit=commit(p, 1))

    desk = Desk({done.plan_id: reports})
    seen = desk.finished
    with MergeThreads(1) as pool:
        merges, _ = scheduler(desk, pool, bound=0.0)
        merges.offer("t", [done])
        assert merges.running() == 1
        gate.set()
        assert merges.wait(10), "the worker reported (not taken yet: only `advance` takes it)"
        if cancel == "operator":
            assert merges.cancel(done.plan_id, "too late") is None
        else:
            assert merges.cancel_hung() == []
        advance(merges)
    assert len(seen) == 1 and seen[0].commit is not None and seen[0].failure is None


def test_a_cancelled_attempt_that_returns_late_does_not_speak_for_the_plans_retry() -> None:
    """The cancelled attempt's worker is still stuck when the plan is tried again; what it
    reports when it returns belongs to no running attempt, and the retry's commit stands."""
    retried, first_back, retry_back = plan("t", 0), threading.Event(), threading.Event()
    attempts: list[int] = []

    def attempt(p: MergePlan) -> Finished:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            first_back.wait(10)
            return Finished(p, failure=RuntimeError("the cancelled attempt's late report"))
        retry_back.wait(10)
        return Finished(p, commit=commit(p, 2))

    desk = Desk({retried.plan_id: attempt})
    seen = desk.finished
    with MergeThreads(2) as pool:
        merges, _ = scheduler(desk, pool)
        merges.offer("t", [retried])
        begun(merges)
        assert merges.cancel(retried.plan_id, "cancelled by an operator (request r1)") == retried
        advance(merges)
        merges.offer("t", [retried])  # tried again, the first worker still stuck
        assert merges.running() == 1
        first_back.set()
        time.sleep(0.2)
        advance(merges)
        assert len(seen) == 1 and merges.running() == 1, "the late report is nobody's"
        retry_back.set()
        while merges.running():
            merges.wait(0.05)
            advance(merges)
    assert [isinstance(f.failure, MergeCancelled) for f in seen] == [True, False]
    assert seen[1].commit is not None, "the retry committed, and is recorded so"


def test_the_per_round_limit_holds_plans_back_but_not_an_operators_request() -> None:
    desk = Desk()
    merges, activity = scheduler(desk, per_round=1)
    plans = {t: plan(t, 0) for t in "abc"}
    for table, p in plans.items():
        merges.offer(table, [p])
    assert desk.recorded == [], "with a per-round limit, offering starts nothing by itself"
    advance(merges)
    (first,) = [t for t, p in plans.items() if p.plan_id in desk.recorded]
    assert len(desk.recorded) == 1 and set(activity.waiting) == set("abc") - {first}
    requested = [plan("r", 0), plan("r", 1)]
    merges.offer("r", requested, at_once=True)
    assert desk.recorded[1:] == [p.plan_id for p in requested], "a request runs at once, whole"


def test_a_draining_scheduler_starts_nothing() -> None:
    desk = Desk()
    merges, _ = scheduler(desk)
    merges.draining = True
    merges.offer("t", [plan("t", 0)])
    assert not advance(merges)
    assert desk.recorded == [] and merges.waiting.tables() == ["t"]


def begun(merges: MergeScheduler[Noted], timeout: float = 10.0) -> None:
    """Until a worker began every merge in flight (a merge's time bound counts from then)."""
    deadline = time.monotonic() + timeout
    while len(merges.inflight.running_since()) < merges.running():
        assert time.monotonic() < deadline, "no worker began the merge"
        time.sleep(0.005)


def test_a_merge_cancelled_before_a_worker_began_it_never_runs() -> None:
    """Cancelled while it waits for a thread: it is reported failed, and never commits later."""
    first, queued, gate = plan("t", 0), plan("u", 0), threading.Event()
    ran: list[str] = []

    def held(p: MergePlan) -> Finished:
        gate.wait(10)
        return Finished(p, commit=commit(p, 1))

    def runs(p: MergePlan) -> Finished:
        ran.append(p.plan_id)
        return Finished(p, commit=commit(p, 1))

    desk = Desk({first.plan_id: held, queued.plan_id: runs})
    with MergeThreads(1) as pool:
        merges, _ = scheduler(desk, pool, slots=2)
        merges.offer("t", [first])
        merges.offer("u", [queued])
        assert merges.cancel(queued.plan_id, "cancelled by an operator (request r2)") == queued
        gate.set()
        while merges.running():
            merges.wait(0.05)
            advance(merges)
    assert ran == [], "the cancelled merge never began"
    assert [(f.plan.table, f.commit is not None) for f in desk.finished] == [("u", False), ("t", True)]


@dataclass
class CountingDesk(Desk):
    """A desk that counts how often the scheduler asks a plan's pool (once per look at a plan)."""

    asked: int = 0

    def pool(self, plan: MergePlan) -> str | None:
        self.asked += 1
        return None


def test_a_batch_offering_many_tables_with_every_slot_busy_looks_at_each_plan_a_bounded_number_of_times() -> (
    None
):
    """A batch of 200 tables' plans while the one slot runs a merge: each offer used to run a
    round that looked at every waiting plan (40,000 looks, quadratic in the tables). Now the
    round after the batch's offers says why each waits, and starts the first when the slot frees."""
    busy, gate = plan("busy", 0), threading.Event()
    desk = CountingDesk({busy.plan_id: lambda p: (gate.wait(10), Finished(p, commit=commit(p, 1)))[1]})
    tables = [f"t{i:03d}" for i in range(200)]
    with MergeThreads(1) as pool:
        merges, activity = scheduler(desk, pool, slots=1)
        merges.offer("busy", [busy])
        desk.asked = 0
        for table in tables:
            merges.offer(table, [plan(table, 0)])
        advance(merges)  # the batch's round after its offers
        assert desk.asked <= 3 * len(tables), f"{desk.asked} looks at 200 waiting plans"
        assert activity.waiting == {t: "all 1 merge slots are busy" for t in tables}
        gate.set()
        deadline = time.monotonic() + 10
        while len(desk.began) < 2 and time.monotonic() < deadline:  # the tick's turn, when it reports
            merges.wait(0.1)
            advance(merges)
        assert desk.began[:2] == [busy.plan_id, plan("t000", 0).plan_id], "the slot went to the next in line"

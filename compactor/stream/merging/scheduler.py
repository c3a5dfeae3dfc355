"""The merge scheduler: from plans made to outcomes announced.

Plans wait (`WaitingPlans`, fair share across tables) until the job's slots give them a turn;
each then runs on a worker (`InFlight`), and what it did is recorded and announced on the
thread that holds the job's state, each table's in the order its commits were made. A plan
whose inputs changed under it makes its table owed one more attempt; a merge running past its
time bound, or one an operator cancels, is cancelled and reported failed.

The scheduler plans, commits, records and announces nothing itself: the stream does, through
the `MergeDesk` it is given. It holds no lock of its own either: its caller (the batch handler)
calls it under the lock that keeps the job's state to one thread.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from compactor.domain.plans import MergePlan
from compactor.errors import MergeCancelled
from compactor.stream.merging.inflight import InFlight
from compactor.stream.merging.waiting import WaitingPlans
from compactor.stream.merging.workers import Finished

log = logging.getLogger(__name__)


class Recorded(Protocol):
    """A finished merge as the stream recorded it: handed to `MergeDesk.announce` as it is, in
    the table's commit order. The scheduler reads two things of it."""

    @property
    def stale(self) -> bool:
        """Its inputs changed under it: the table is owed one more attempt."""
        ...

    @property
    def held(self) -> bool:
        """Its table was quarantined: the plans it has waiting are dropped."""
        ...


Outcome = TypeVar("Outcome", bound=Recorded)


@dataclass
class Turn:
    """One pass of the scheduler (a batch's, a tick's): the merges it may still start (None: no
    limit), the tables it handed back for an attempt (each once a turn), and whether anything
    happened."""

    left: int | None
    handed_back: set[str] = field(default_factory=set)
    happened: bool = False


class MergeDesk(Protocol[Outcome]):
    """What the scheduler asks of the stream around each merge."""

    def pool(self, plan: MergePlan) -> str | None:
        """The Spark pool the plan runs in (None: the default)."""
        ...

    def job(self, plan: MergePlan) -> Callable[[], Finished]:
        """The plan's commit, to run on a worker (built now, on the state's thread)."""
        ...

    def started(self, plan: MergePlan) -> None:
        """A worker took the plan's commit (noted: a job that dies during it knows at its start)."""
        ...

    def record(self, finished: Finished) -> Outcome:
        """What the merge did, into the job's state."""
        ...

    def announce(self, outcome: Outcome) -> None:
        """Publish an outcome; raises when Kafka refuses (it is offered again, first in line)."""
        ...

    def cancel(self, plan: MergePlan, why: str) -> None:
        """Stop a merge's work (hung, or cancelled by an operator), and any commit it would
        still make."""
        ...


class MergeActivity(Protocol):
    """Who reads what the merges are doing (the status, the metrics): told, never asked."""

    def on_started(self, table: str) -> None: ...

    def on_finished(self, table: str) -> None: ...

    def on_waiting(self, reasons: dict[str, str]) -> None: ...


def _no_phase(name: str) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


@dataclass
class MergeScheduler(Generic[Outcome]):
    """Plans waiting, merges in flight, and outcomes owed to Kafka, for one shard.

    `time_bound`: how long a plan's merge may run before it is cancelled (seconds, counted
    from when a worker began it: a merge waiting for a thread is not hung); `phase`: times the scheduler's own work ("commit" for starting merges, which
    runs them with inline workers; "publish" for announcing).
    """

    inflight: InFlight
    waiting: WaitingPlans
    desk: MergeDesk[Outcome]
    activity: MergeActivity
    time_bound: Callable[[MergePlan], float]
    phase: Callable[[str], AbstractContextManager[None]] = _no_phase
    draining: bool = False  # stopping: the merges in flight finish, no new one starts
    _owed: set[str] = field(default_factory=set)  # tables to attempt again: their plans went stale
    _unsent: list[Outcome] = field(default_factory=list)  # recorded, not yet acknowledged by Kafka

    # -- what the handler asks ------------------------------------------------------------------

    def offer(
        self, table: str, plans: Sequence[MergePlan], at_once: bool = False, whole: bool = True
    ) -> None:
        """The table's latest plans, replacing those it had waiting (`whole`: see
        `WaitingPlans.offer`); started as slots allow (`at_once`: an operator's request, not
        held back by the per-round limit), and what finished recorded, so that with inline
        workers these merges are done on return."""
        self.waiting.offer(table, plans, whole)
        if at_once:
            self._round(None, only=table)
        elif self.waiting.per_round is None and self.inflight.free_slots() > 0:
            # with every slot busy nothing can start: the round after the batch's offers (or the
            # tick's, when a merge finishes) says why each waits; a round here for each of a
            # batch's thousand tables looked at every waiting plan a thousand times
            self._round(None)
        self._collect()

    def turn(self, limit: int | None = None) -> Turn:
        """A new pass that may start `limit` merges (default: the waiting plans' `per_round`)."""
        return Turn(self.waiting.per_round if limit is None else limit)

    def advance(self, turn: Turn) -> list[str]:
        """Record and announce what finished and start what waits, until nothing more happens
        now (with inline workers, until the merges are done); or stop early with the tables owed
        an attempt (their plans went stale), each handed back once a turn. The caller attempts
        those (offering their new plans here) and advances the same turn again; [] when it is
        over."""
        while True:
            finished = self._collect()
            owed = sorted(self._owed - turn.handed_back) if turn.left != 0 else []
            if owed:
                self._owed -= set(owed)
                turn.handed_back |= set(owed)
                turn.happened = True
                return owed
            started = self._round(turn.left)
            if turn.left is not None:
                turn.left -= started
            if not (finished or started):
                return []
            turn.happened = True

    def quiesce(self, table: str) -> None:
        """Wait until the table has no merge in flight, recording each as it finishes."""
        while self.inflight.running(table):
            self.inflight.wait(1.0)
            self._collect()

    def cancel_hung(self) -> list[MergePlan]:
        """Cancel each merge running past its time bound (its work, and any commit it would still
        make): it is reported failed, so its slot is freed and its table cools down and is tried
        again, or is quarantined like any table whose merges keep failing. The plans cancelled."""
        cancelled = []
        for plan, ran, bound in self.inflight.hung(time.monotonic()):
            why = f"ran {ran:.0f}s, past its bound of {bound:.0f}s; cancelled"
            if self._cancel(plan, MergeCancelled(why)):
                log.error("plan %s of table %s %s", plan.plan_id, plan.table, why)
                cancelled.append(plan)
        return cancelled

    def cancel(self, plan_id: str, why: str, table: str | None = None) -> MergePlan | None:
        """An operator's cancel of the merge running under `plan_id` (only a merge of `table`,
        when given), the way a hung merge is cancelled: it is reported failed with `why`, its
        slot freed, and it is tried again after its cool-down. The plan cancelled; None when no
        such merge runs in this shard (it finished, or never started here)."""
        plan = next(
            (
                p
                for p in self.inflight.unfinished()
                if p.plan_id == plan_id and (table is None or p.table == table)
            ),
            None,
        )
        if plan is None or not self._cancel(plan, MergeCancelled(why, by_operator=True)):
            return None
        log.info("plan %s of table %s: %s", plan.plan_id, plan.table, why)
        return plan

    def _cancel(self, plan: MergePlan, failure: MergeCancelled) -> bool:
        """Stop the merge's work and fence its commit first, then report it failed; False when
        its worker had reported already (what it reported stands: a commit is never reported
        failed)."""
        self.desk.cancel(plan, str(failure))
        return self.inflight.abandon(plan.plan_id, failure)

    def running(self, table: str | None = None) -> int:
        return self.inflight.running(table)

    def wait(self, timeout: float) -> bool:
        """Until a merge reports or a slot comes free anywhere in the job, at most `timeout`."""
        return self.inflight.wait(timeout)

    def close(self, wait: bool = True) -> None:
        """Stop the workers (`wait`: let the merges in flight finish first)."""
        self.inflight.workers.shutdown(wait=wait, cancel_futures=True)

    # -- starting -------------------------------------------------------------------------------

    def _round(self, limit: int | None, only: str | None = None) -> int:
        """Start waiting plans, fair-share order, as slots allow (`only`: that table's, in order).
        The job's slots are one account for all its shards: this shard says which tables it has
        ready, and a plan whose turn another shard's table has first waits for the next round."""
        if self.draining:
            return 0
        self._offer_ready()
        started = 0
        if only is None:  # each started before the next is chosen: it takes a slot
            plans = self.waiting.next_round(
                self._startable, self.inflight.free_slots, limit, self.inflight.slots.occupation
            )
        else:
            plans = iter([p for p in self.waiting.waiting(only) if self._startable(p)])
        for plan in plans:
            if only is not None:
                self.waiting.offer(only, [p for p in self.waiting.waiting(only) if p != plan])
            if not self._start(plan):
                self.waiting.put_back(plan)
                break
            started += 1
        self._offer_ready()
        return started

    def _offer_ready(self) -> None:
        """Tell the job's slots what this shard has ready, and the status why the rest waits."""
        # with every slot busy no plan is startable: the look at each is saved
        ready = self.waiting.ready(self._startable) if self.inflight.free_slots() > 0 else []
        self.inflight.demand({p.table: self.desk.pool(p) for p in ready})
        reasons = {}
        for table in self.waiting.tables():
            first = self.waiting.waiting(table)[0]
            why = self.inflight.blocked(first, self.desk.pool(first))
            reasons[table] = why or "its turn for a merge slot (fair share)"
        self.activity.on_waiting(reasons)

    def _startable(self, plan: MergePlan) -> bool:
        return self.inflight.blocked(plan, self.desk.pool(plan)) is None

    def _start(self, plan: MergePlan) -> bool:
        """Start the plan on a worker; False if the job's slots gave its turn to another shard."""
        job = self.desk.job(plan)
        with self.phase("commit"):  # with inline workers the merge runs here
            self.activity.on_started(plan.table)
            started = self.inflight.start(plan, self.desk.pool(plan), job, self.time_bound(plan))
        if started:
            self.desk.started(plan)
        else:
            self.activity.on_finished(plan.table)
        return started

    # -- finishing ------------------------------------------------------------------------------

    def _collect(self) -> int:
        """Record, then announce, the merges that finished (each table's in commit order)."""
        finished = self.inflight.take_finished()
        for item in finished:
            self.activity.on_finished(item.plan.table)
            recorded = self.desk.record(item)
            if item.commit is not None:  # a plan that waits on the same inputs is stale now
                self.waiting.drop_taking(item.plan.table, item.plan.input_ids)
            if recorded.held:
                self.waiting.drop(item.plan.table)  # its queued plans would fail as this one did
            if recorded.stale:
                self._owed.add(item.plan.table)
            self._unsent.append(recorded)
        self._announce_unsent()
        return len(finished)

    def _announce_unsent(self) -> None:
        """Announce the recorded outcomes in order; one Kafka refuses stays first in line."""
        if not self._unsent:
            return
        with self.phase("publish"):
            while self._unsent:
                self.desk.announce(self._unsent[0])
                self._unsent.pop(0)

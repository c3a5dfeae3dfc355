"""Merges in flight: plans running on worker threads beside the batches, as the job's slots allow.

- **Slots.** At most `limit` merges run at once (`operations.max_concurrent_merges`), and a
  Spark pool with a concurrency (the replicas of a Hydrolix merge pool) at most that many of
  its own. The slots are the job's: the shards it runs share them (`Slots`), each shard its
  own `InFlight`.
- **Bookings.** A plan starts only when none of its inputs is in a running plan: a segment is
  in at most one merge in flight. A table-wide plan (a rewrite of every segment) starts only
  when its table has nothing running, and nothing of that table starts beside it.
- **Order.** Each table's finished merges are handed back in the order they committed: a
  finished merge is held while another merge of its table that committed earlier has not
  reported yet (its worker is between its commit and its report), so each table's results
  and events follow its commits.

Workers only commit (`Runner.execute`); what they found is handed back here, and the one
thread that holds the job's state records and announces it. A slot and the inputs' bookings
are freed when the result is taken, that is when the catalog is about to show it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

from compactor.domain.plans import MergePlan
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.workers import Finished, Workers


@dataclass
class _Running:
    plan: MergePlan
    pool: str | None
    finished: Finished | None = None  # set when the worker reported
    since: float | None = None  # when a worker began it (monotonic); None while it waits for a thread
    abandoned: bool = False  # cancelled (hung, or by an operator): what its worker reports is ignored
    future: Future[Finished] | None = None
    bound: float = math.inf  # seconds it may run before it counts as hung


@dataclass
class InFlight:
    workers: Workers
    slots: Slots
    committed_at: Callable[[str, str], int | None]  # (table, plan id) -> its commit's version
    shard: int = 0  # which of the job's shards this is (the slots' account names it)
    _running: dict[str, _Running] = field(default_factory=dict)  # plan id ->
    _booked: dict[str, dict[str, str]] = field(default_factory=dict)  # table -> segment id -> plan id
    _reported: list[Finished] = field(default_factory=list)  # by workers, not taken yet
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _freed: bool = False  # a slot came free somewhere in the job since the last wait
    _unwake: Callable[[], None] = field(default=lambda: None)

    def __post_init__(self) -> None:
        self._unwake = self.slots.on_free(self._slot_freed)

    def _slot_freed(self) -> None:
        with self._changed:
            self._freed = True
            self._changed.notify_all()

    # -- what runs ----------------------------------------------------------------------------

    def running(self, table: str | None = None) -> int:
        return sum(1 for r in self._running.values() if table is None or r.plan.table == table)

    def running_plans(self) -> list[MergePlan]:
        return [r.plan for r in self._running.values()]

    def booked(self, table: str) -> dict[str, str]:
        """Segment id -> the running plan that holds it."""
        return dict(self._booked.get(table, {}))

    @property
    def limit(self) -> int:
        return self.slots.limit

    def free_slots(self) -> int:
        return self.slots.free()

    def blocked(self, plan: MergePlan, pool: str | None) -> str | None:
        """Why the plan cannot start now (None: it can)."""
        return self._held(plan) or self.slots.blocked(pool)

    def _held(self, plan: MergePlan) -> str | None:
        """Why this shard's own merges keep the plan from starting (None: they do not)."""
        if plan.plan_id in self._running:
            return "it is running"
        table = [r.plan for r in self._running.values() if r.plan.table == plan.table]
        if any(p.table_wide for p in table):
            return "a rewrite of the whole table is running"
        if plan.table_wide and table:
            return f"it rewrites the whole table and {len(table)} of its merges are running"
        held = self._booked.get(plan.table, {})
        busy = sorted({held[s] for s in plan.input_ids if s in held})
        if busy:
            return f"inputs are in running plans {busy}"
        return None

    def demand(self, tables: Mapping[str, str | None]) -> None:
        """Tell the job's slots which tables this shard has a merge ready for (and its pool)."""
        self.slots.demand(self.shard, tables)

    def start(
        self, plan: MergePlan, pool: str | None, job: Callable[[], Finished], bound: float = math.inf
    ) -> bool:
        """Run `job` (the plan's commit) on a worker if the job's slots give the plan one (one
        atomic step: `Slots.try_take`); False when they do not (it waits for its turn). `bound`:
        seconds it may run, once a worker began it, before `hung` names it."""
        why = self._held(plan)
        if why is not None:
            raise ValueError(f"plan {plan.plan_id} cannot start: {why}")
        if self.slots.try_take(plan.plan_id, plan.table, pool, self.shard) is not None:
            return False
        attempt = _Running(plan, pool, bound=bound)
        with self._changed:
            self._running[plan.plan_id] = attempt
        self._booked.setdefault(plan.table, {}).update(dict.fromkeys(plan.input_ids, plan.plan_id))

        def run() -> Finished:
            # its time bound counts from here: a merge waiting for a thread is not hung
            attempt.since = time.monotonic()
            return job()

        attempt.future = self.workers.submit(run)
        attempt.future.add_done_callback(lambda done: self._report(attempt, done))
        return True

    def _report(self, attempt: _Running, done: Future[Finished]) -> None:
        """On the worker's thread: the attempt's result (an escaped exception is the plan's failure)."""
        plan = attempt.plan
        if done.cancelled():  # the job was stopped before the merge began
            finished = Finished(plan, failure=RuntimeError("the job stopped before this merge began"))
        else:
            error = done.exception()
            finished = Finished(plan, failure=error) if error is not None else done.result()
        with self._changed:
            # an abandoned attempt's outcome was reported when it was cancelled; its worker may
            # return only after the plan was tried again, and must not speak for that attempt
            if attempt.abandoned or self._running.get(plan.plan_id) is not attempt:
                return
            self._reported.append(finished)
            self._changed.notify_all()

    def running_since(self) -> list[tuple[MergePlan, float]]:
        """The merges a worker is running, each with when it began (monotonic seconds); not
        those still waiting for a thread. Safe from any thread (the watchdog's)."""
        return [(r.plan, r.since) for r in self._started() if r.since is not None]

    def hung(self, now: float) -> list[tuple[MergePlan, float, float]]:
        """The merges running past their bound: (plan, seconds run, bound). Safe from any thread."""
        return [
            (r.plan, now - r.since, r.bound)
            for r in self._started()
            if r.since is not None and now - r.since > r.bound
        ]

    def unfinished(self) -> list[MergePlan]:
        """The merges neither reported nor abandoned, begun or still waiting for a thread."""
        return [r.plan for r in self._unfinished()]

    def _unfinished(self) -> list[_Running]:
        with self._changed:
            running = list(self._running.values())
        return [r for r in running if r.finished is None and not r.abandoned]

    def _started(self) -> list[_Running]:
        return [r for r in self._unfinished() if r.since is not None]

    def abandon(self, plan_id: str, failure: BaseException) -> bool:
        """Report a running merge (hung, or cancelled) as failed now: its slot and inputs are
        freed when the failure is taken, and whatever its worker reports later is ignored. False
        when it is not running, or its worker reported already: that report stands (a second
        one would replace it when taken, and a commit must not be reported as a failure)."""
        with self._changed:
            running = self._running.get(plan_id)
            if running is None or running.abandoned or running.finished is not None:
                return False
            if any(f.plan.plan_id == plan_id for f in self._reported):
                return False
            running.abandoned = True
            self._reported.append(Finished(running.plan, failure=failure))
            self._changed.notify_all()
        future = running.future
        # not begun: it never will; begun, its thread may never come back: another takes its place
        if future is not None and not future.cancel():
            self.workers.write_off(future)
        return True

    # -- what finished ------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Until a worker reports or a slot comes free anywhere in the job (True), or `timeout`
        passes (False)."""
        with self._changed:
            found = self._changed.wait_for(lambda: bool(self._reported) or self._freed, timeout)
            self._freed = False
            return found

    def take_finished(self) -> list[Finished]:
        """What finished, each table's in commit order; frees the slots and bookings handed back."""
        with self._changed:
            reported, self._reported = self._reported, []
        for finished in reported:
            self._running[finished.plan.plan_id].finished = finished
        released: list[Finished] = []
        for table in sorted({r.plan.table for r in self._running.values() if r.finished is not None}):
            released += self._in_commit_order(table)
        for finished in released:
            plan = finished.plan
            with self._changed:
                del self._running[plan.plan_id]
            self.slots.give(plan.plan_id)
            booked = self._booked.get(plan.table, {})
            for sid in plan.input_ids:
                if booked.get(sid) == plan.plan_id:
                    del booked[sid]
            if not booked:
                self._booked.pop(plan.table, None)
        return released

    def release(self) -> None:
        """Give back the slots of merges left running (the shard stopped): the job's other
        shards may use them; those merges' outcomes are never taken."""
        for plan_id in self._running:
            self.slots.give(plan_id)
        self.slots.demand(self.shard, {})
        self._unwake()  # the job's slots keep nothing of this shard

    def _in_commit_order(self, table: str) -> list[Finished]:
        """The table's reported merges that no unreported earlier commit of the table precedes."""
        mine = [r for r in self._running.values() if r.plan.table == table]
        done = sorted((r.finished for r in mine if r.finished is not None), key=_commit_order)
        pending = [r.plan.plan_id for r in mine if r.finished is None]
        earlier = (
            [v for v in (self.committed_at(table, p) for p in pending) if v is not None] if pending else []
        )
        first_pending = min(earlier, default=None)
        return [f for f in done if f.version is None or first_pending is None or f.version < first_pending]


def _commit_order(finished: Finished) -> int:
    return finished.version if finished.version is not None else -1

"""Merges in flight: plans running on worker threads beside the batches, as the job's slots allow.

- **Slots.** At most `limit` merges run at once (`operations.max_concurrent_merges`), and a
  Spark pool with a concurrency (seed 003's pool replicas) at most that many of its own. The
  slots are the job's: the shards it runs share them (`Slots`), each shard its own `InFlight`.
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

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from compactor.domain.plans import Commit, MergePlan


@dataclass(frozen=True, slots=True)
class Finished:
    """A plan as its worker left it: committed, or why not."""

    plan: MergePlan
    commit: Commit | None = None
    stale: str | None = None  # its inputs changed under it: re-plan
    skipped: str | None = None  # not tried (no room for its output)
    failure: BaseException | None = None
    conflicts: int = 0  # commit races lost before the end

    @property
    def version(self) -> int | None:
        return self.commit.version if self.commit is not None else None


class Workers(Protocol):
    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


class InlineWorkers:
    """Runs each merge at once on the calling thread: unit tests, and a batch that must wait."""

    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]:
        future: Future[Finished] = Future()
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed back as the plan's failure, as a worker's would be
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def thread_workers(limit: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=limit, thread_name_prefix="compactor-merge")


class SharedWorkers:
    """One shard's share of the job's worker threads: stopping it cancels and waits for this
    shard's merges only, the pool goes on for the others."""

    def __init__(self, pool: Workers) -> None:
        self.pool = pool
        self._futures: set[Future[Finished]] = set()
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]:
        future = self.pool.submit(fn)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[Finished]) -> None:
        with self._lock:
            self._futures.discard(future)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            mine = list(self._futures)
        if cancel_futures:
            for future in mine:
                future.cancel()
        if wait:
            for future in mine:
                if not future.cancelled():
                    future.exception()  # waits; the outcome was reported to its InFlight


OCCUPATION_WINDOW_S = 600.0  # merge time counts toward a table's occupation this long


class Slots:
    """The job's merge slots: one account for every shard it runs and every Spark pool.

    At most `limit` merges run at once, and a pool with a concurrency (seed 003's replicas, a
    rule's `cores_while_compacting`) at most that many of its own. Checking for a free slot and
    taking it is one step under one lock (`try_take`), so two shards never both take the last
    one.

    Which table gets a free slot follows its **occupation** (Apache Amoro's measure): the merge
    time it used over the last `window` seconds (its running merges' time so far included),
    divided by its `quota` (default 1: equal shares). Each shard says which tables it has a
    merge ready for (`demand`); a slot goes to one of the tables with the lowest occupation, and
    a shard whose table would pass another shard's lower one waits for that one to take its
    turn. A freed slot wakes every shard (`wake`), not only the one whose merge ended.
    """

    def __init__(
        self,
        limit: int,
        concurrency: Callable[[str], int | None],
        quota: Callable[[str], float] = lambda table: 1.0,
        clock: Callable[[], float] = time.monotonic,
        window: float = OCCUPATION_WINDOW_S,
    ) -> None:
        self.limit = limit
        self.concurrency = concurrency  # a Spark pool's own limit (None: any free slot)
        self.quota = quota
        self.clock = clock
        self.window = window
        self._taken: dict[str, tuple[str | None, str, float]] = {}  # plan id -> pool, table, since
        self._used: dict[str, deque[tuple[float, float]]] = {}  # table -> (started, ended) of its merges
        self._demand: dict[int, dict[str, str | None]] = {}  # shard -> table -> its next plan's pool
        self._wakers: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def free(self) -> int:
        with self._lock:
            return max(0, self.limit - len(self._taken))

    def on_free(self, wake: Callable[[], None]) -> None:
        """Call `wake` whenever a slot is given back (a shard's ticker then looks for its turn)."""
        with self._lock:
            self._wakers.append(wake)

    def demand(self, shard: int, tables: Mapping[str, str | None]) -> None:
        """The tables `shard` has a merge ready to start for (table -> that merge's pool)."""
        with self._lock:
            if tables:
                self._demand[shard] = dict(tables)
            else:
                self._demand.pop(shard, None)

    def occupation(self, table: str) -> float:
        with self._lock:
            return self._occupation(table, self.clock())

    def blocked(self, pool: str | None) -> str | None:
        """Why no merge of `pool` can start now (None: it can)."""
        with self._lock:
            return self._blocked(pool)

    def try_take(self, plan_id: str, table: str, pool: str | None, shard: int = 0) -> str | None:
        """Take a slot for the plan if one is free, its pool has room and no other shard has a
        table waiting with a lower occupation; else why not. One step: nothing can take the
        slot between the look and the take."""
        with self._lock:
            why = self._blocked(pool)
            if why is not None:
                return why
            now = self.clock()
            mine = self._occupation(table, now)
            for other, tables in self._demand.items():
                if other == shard:
                    continue
                for waiting, its_pool in tables.items():
                    if self._blocked(its_pool) is None and self._occupation(waiting, now) < mine - 1e-9:
                        return f"table {waiting} of shard {other} has used less of its share"
            self._taken[plan_id] = (pool, table, now)
        return None

    def give(self, plan_id: str) -> None:
        with self._lock:
            found = self._taken.pop(plan_id, None)
            if found is not None:
                _, table, since = found
                self._used.setdefault(table, deque()).append((since, self.clock()))
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def running(self) -> int:
        with self._lock:
            return len(self._taken)

    def _blocked(self, pool: str | None) -> str | None:
        if len(self._taken) >= self.limit:
            return f"all {self.limit} merge slots are busy"
        cap = self.concurrency(pool) if pool is not None else None
        in_pool = sum(1 for p, _, _ in self._taken.values() if p == pool)
        if cap is not None and in_pool >= cap:
            return f"pool {pool} runs {in_pool} of its {cap} merges"
        return None

    def _occupation(self, table: str, now: float) -> float:
        """Merge seconds of `table` in the window (running merges so far), over its quota."""
        since = now - self.window
        used = self._used.get(table)
        while used and used[0][1] < since:
            used.popleft()
        seconds = sum(end - max(start, since) for start, end in used or ())
        seconds += sum(now - max(at, since) for _, t, at in self._taken.values() if t == table)
        return seconds / max(self.quota(table), 1e-9)


@dataclass
class _Running:
    plan: MergePlan
    pool: str | None
    finished: Finished | None = None  # set when the worker reported
    since: float = field(default_factory=time.monotonic)
    abandoned: bool = False  # cancelled as hung: whatever its worker reports later is ignored


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

    def __post_init__(self) -> None:
        self.slots.on_free(self._slot_freed)

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

    def start(self, plan: MergePlan, pool: str | None, job: Callable[[], Finished]) -> bool:
        """Run `job` (the plan's commit) on a worker if the job's slots give the plan one (one
        atomic step: `Slots.try_take`); False when they do not (it waits for its turn)."""
        why = self._held(plan)
        if why is not None:
            raise ValueError(f"plan {plan.plan_id} cannot start: {why}")
        if self.slots.try_take(plan.plan_id, plan.table, pool, self.shard) is not None:
            return False
        self._running[plan.plan_id] = _Running(plan, pool)
        self._booked.setdefault(plan.table, {}).update(dict.fromkeys(plan.input_ids, plan.plan_id))
        self.workers.submit(job).add_done_callback(lambda done: self._report(plan, done))
        return True

    def _report(self, plan: MergePlan, done: Future[Finished]) -> None:
        """On the worker's thread: the job's result (an escaped exception is the plan's failure)."""
        if done.cancelled():  # the job was stopped before the merge began
            finished = Finished(plan, failure=RuntimeError("the job stopped before this merge began"))
        else:
            error = done.exception()
            finished = Finished(plan, failure=error) if error is not None else done.result()
        with self._changed:
            running = self._running.get(plan.plan_id)
            if running is None or running.abandoned:
                return  # cancelled as hung: its outcome was reported then
            self._reported.append(finished)
            self._changed.notify_all()

    def running_since(self) -> list[tuple[MergePlan, float]]:
        """The merges running, each with when it started (monotonic seconds)."""
        return [(r.plan, r.since) for r in self._running.values() if r.finished is None and not r.abandoned]

    def abandon(self, plan_id: str, failure: BaseException) -> None:
        """Report a hung merge as failed now: its slot and inputs are freed when the failure is
        taken, and whatever its worker reports later is ignored."""
        with self._changed:
            running = self._running.get(plan_id)
            if running is None or running.abandoned or running.finished is not None:
                return
            running.abandoned = True
            self._reported.append(Finished(running.plan, failure=failure))
            self._changed.notify_all()

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

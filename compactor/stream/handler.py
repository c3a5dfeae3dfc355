"""The `foreachBatch` handler: decode -> admit -> plan -> commit -> announce.

Commit order, per plan: (1) the Delta commit that replaces the inputs, on a merge
worker; (2) the catalog update; (3) the `MergeResult` and the outputs'
`SegmentCompleted`, produced and acknowledged by Kafka, in the order the table's
commits were made. Merges run beside the batches (`InFlight`): a batch admits its
events, starts the merges they make possible and saves the catalog; Spark then
checkpoints its offsets, whether or not those merges are done. A crash replays the
batch and the restart attempts every table once (`DueTimes`), so a merge that was
in flight is planned again; deterministic plan ids and Delta's txnAppId make
repeated work a no-op. What a merge finishing, or time passing, makes possible is
taken up by the next batch or by `tick`, whichever comes first. One lock keeps the
job's state (catalog, plans, queues) to one thread at a time; workers only commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compactor.catalog.store import CatalogStore
from compactor.domain.events import MergeStatus
from compactor.domain.plans import MergePlan
from compactor.domain.segments import Segment
from compactor.errors import DeliveryError, MergeCancelled, Rejected
from compactor.rules.due import Due
from compactor.stream.admission import Admission, table_of
from compactor.stream.announcer import Announcer
from compactor.stream.fair_share import INLINE_ORIGINS, WaitingPlans
from compactor.stream.faults import WITH_MERGES_IN_FLIGHT, fault_point
from compactor.stream.inflight import Finished, InFlight
from compactor.stream.planning import TablePlanner
from compactor.stream.purging import OtherWriters, Purges, purge_segments, written_since
from compactor.stream.recovery import Unread, catch_up
from compactor.stream.runner import Runner, RunOutcome, config_fingerprint, quarantine_error
from compactor.stream.state import StreamState
from compactor.stream.sub_partition_delete import delete_value
from compactor.stream.triggers import DeadLetter, Envelope, Trigger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

DUE_PER_TICK = 64  # tables attempted per tick for their due time; the rest in the next ticks
TICK_SAVE_EVERY_S = 5.0  # between batches, the catalog is saved at most this often
SWEEP_PER_TICK = 32  # tables start-up left unread, caught up per tick


@dataclass
class BatchHandler:
    """Callable passed to `foreachBatch`; owns the catalog for the job's lifetime."""

    state: StreamState
    admission: Admission
    planner: TablePlanner
    runner: Runner
    announcer: Announcer
    catalog_store: CatalogStore
    inflight: InFlight
    waiting: WaitingPlans
    purges: Purges
    other_writers: OtherWriters
    unread: Unread = field(default_factory=Unread)  # tables start-up left to catch up (`current`)
    lock: threading.RLock = field(default_factory=threading.RLock)
    # tables a table-wide rewrite replaced: checked against the table when the batch saves,
    # since the overwrite also took whatever was loaded between planning and its read
    _rewritten: set[str] = field(default_factory=set)
    _owed: set[str] = field(default_factory=set)  # tables to attempt again: their plans went stale
    _unsent: list[RunOutcome] = field(default_factory=list)  # recorded, not yet acknowledged by Kafka
    _draining: bool = False  # stopping: the merges in flight finish, no new one starts
    _saved_at: float = 0.0  # when the catalog was last saved (monotonic seconds)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        with self.state.metrics.phase("collect"):
            rows = batch.select("key", "value", "topic", "partition", "offset").collect()
        log.info("batch %d: %d event(s)", batch_id, len(rows))
        self.process([_envelope(row) for row in rows])
        self.state.metrics.on_batch(time.monotonic() - started)

    def process(self, envelopes: Sequence[Envelope]) -> None:
        """One batch: what finished since the last is recorded first; then every valid event's
        work in order, the batch's dead letters, and the catalog caught up with the tables it
        touched and saved, before Spark records the offsets."""
        with self.lock:
            self.state.stats.events += len(envelopes)
            phase = self.state.metrics.phase
            with phase("decode"):
                decoded, dead = self.admission.decode(envelopes)
            with phase("rows_present"):
                present = self.admission.rows_present(decoded)
            self.advance(limit=0)  # what finished since the last batch, before admission reads the catalog
            touched: set[str] = set()
            for item in decoded:
                self.current(table_of(item.event))
                try:
                    trigger = self.admission.admit(item.event, present)
                    self._announce_new_tables()
                    if trigger is not None:
                        touched.add(trigger.table)
                        self._dispatch(trigger)
                except Rejected as exc:
                    dead.append(DeadLetter(item.envelope, exc.reason, exc.detail))
            self.advance()  # with a merge limit: the batch's merges, in fair-share order
            with phase("publish"):
                self.announcer.dead_letters(dead)
            with phase("catalog"):
                self.save(touched)
        self.state.metrics.on_events(len(envelopes))  # counted once their work is saved

    def tick(self) -> None:
        """Between batches: record and announce the merges that finished, attempt the tables owed
        an attempt and those due with time (a bounded number per tick, so a batch waits no
        longer), start what waits for a slot, and save what that changed."""
        with self.lock:
            self._cancel_hung()
            self.advance()
            due = [] if self._draining else self.planner.due.pop_due(self.state.clock(), DUE_PER_TICK)
            for table, when in due:
                self._attempt_due(table, when)
            if due:
                self.advance()
            for table in self.unread.next(SWEEP_PER_TICK):
                self.current(table)
            # a batch saves before Spark records its offsets; between batches a save only spares
            # a restart announcing merges again (Delta holds them), so it happens at most so often
            if self.state.catalog.changed and time.monotonic() - self._saved_at >= TICK_SAVE_EVERY_S:
                with self.state.metrics.phase("catalog"):
                    self.save(set())
            probe = self.other_writers.due(time.monotonic(), lambda: self.state.catalog.table_names)
        written = [t for t in probe if written_since(self.state, t)]  # file lookups, without the lock
        with self.lock:
            for table in (t for t in written if not self.current(t)):  # an unread one: caught up
                self.recounted(catch_up(self.state.store, self.state.catalog, table, self.state.unannounced))
            busy = lambda table: self.inflight.running(table) > 0 or table in self.unread  # noqa: E731
            purge = None if self._draining else self.purges.take(self.state.catalog, busy)
        if purge:
            self._purge(purge)

    def current(self, table: str) -> bool:
        """Catch up a table start-up left unread (its commits since the mark folded, a crash's
        merges announced) before anything reads or plans it; False for any other table."""
        if not self.unread.take(table):
            return False
        self.recounted(catch_up(self.state.store, self.state.catalog, table, self.state.unannounced))
        self.announcer.announce_unannounced(self.state.catalog, [table])
        return True

    def _purge(self, segments: list[Segment]) -> None:
        """Purge one table's segments (a batch may run meanwhile), then check the table: the
        purge commit is folded and the segments recounted; a failed purge waits to be retried."""
        state = self.state
        done = purge_segments(state, segments)
        with self.lock:
            if not done:
                self.purges.failed(segments)
                return
            self.recounted(
                catch_up(state.store, state.catalog, segments[0].table, state.unannounced, check=True)
            )

    def recounted(self, segments: list[Segment]) -> None:
        """Segments a check recounted: the tables' deleted rows reported, purges queued."""
        for table in sorted({s.table for s in segments}):
            held = self.state.catalog.segments(table)
            deleted = sum(s.deleted for s in held)
            self.state.metrics.on_deleted_rows(table, deleted, deleted + sum(s.records for s in held))
        self.purges.offer(segments)

    def until_due(self, ceiling: float) -> float:
        """Seconds until the next table comes due, at most `ceiling`."""
        with self.lock:
            at = self.planner.due.next_at()
            if at is None:
                return ceiling
            return max(0.0, min(ceiling, (at - self.state.clock()).total_seconds()))

    def _attempt_due(self, table: str, due: Due) -> None:
        """What came due: a schedule's rule, then (as for any due time) every rule of the table."""
        if self.state.catalog.version(table) is None:  # the table left the warehouse
            self.planner.due.forget(table)
            return
        self.current(table)
        log.info("table %s: due (%s)", table, due.why)
        self.state.stats.due_attempts += 1
        if due.rule is not None:
            self._dispatch(Trigger(table, "schedule", only_rule=due.rule))
        self._dispatch(Trigger(table, "due"))
        if self.planner.due.get(table) is None:  # not attempted (off, cooling): when it may be
            self.planner.due.lower(table, self.planner.cool_down.next_end(table))

    def settle(self, timeout: float = 600.0) -> None:
        """Tick until no merge is in flight and nothing is due now (`--until-idle`, tests);
        TimeoutError past `timeout`."""
        deadline = time.monotonic() + timeout
        self.tick()
        while self.inflight.running() or self.until_due(1.0) == 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.inflight.running()} merge(s) still in flight after {timeout}s")
            if self.inflight.running():
                self.inflight.wait(1.0)
            self.tick()
        with self.lock:  # what the merges did, durable before the caller moves on
            self.save(set())

    def fence(self) -> None:
        """The shard was lost: no commit from here on (a merge in flight ends uncommitted; the
        shard's next holder plans it again)."""
        self.state.store.fence()

    def drain(self, timeout: float) -> int:
        """Start no more merges; wait up to `timeout` for those in flight (each recorded and
        announced as it finishes), then stop the workers. Returns how many were left running:
        their plans are made again at the next start."""
        with self.lock:
            self._draining = True
        deadline = time.monotonic() + timeout
        while self.inflight.running() and time.monotonic() < deadline:
            self.inflight.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            self.tick()
        left = self.inflight.running()
        self.close(wait=False)
        with self.lock:
            self.save(set())
        return left

    def save(self, tables: set[str]) -> None:
        """Fold the touched tables' newest commits into the catalog, then make it durable."""
        for table in sorted(tables | self._rewritten):
            checked = table in self._rewritten
            self.recounted(
                catch_up(self.state.store, self.state.catalog, table, self.state.unannounced, checked)
            )
        self._rewritten.clear()
        self.state.unannounced.report(self.state.catalog)
        self.catalog_store.save(self.state.catalog.take_changes())
        self._saved_at = time.monotonic()

    def advance(self, limit: int | None = None) -> bool:
        """Record and announce what finished, attempt the tables owed one, and start what waits,
        until nothing more happens now (with inline workers, until the merges are done).
        `limit`: merges this round may start (default: `max_merges_per_batch`). True if
        anything happened."""
        left = self.waiting.per_round if limit is None else limit
        replanned: set[str] = set()
        happened = False
        while True:
            finished = self._collect()
            owed = sorted(self._owed - replanned) if left != 0 else []
            self._owed -= set(owed)
            replanned |= set(owed)
            for table in owed:
                self._dispatch(Trigger(table, "replan"))
            started = self._round(left)
            if left is not None:
                left -= started
            if not (finished or owed or started):
                return happened
            happened = True

    def work(self, trigger: Trigger) -> None:
        """Plan the trigger's work and start what fits (after a requested sub-partition delete)."""
        table = trigger.table
        if trigger.delete_value is not None:
            self._quiesce(table)  # the delete rewrites the table's segments: no merge of it in flight
            if delete_value(self.runner, table, trigger.delete_value):
                self._rewritten.add(table)  # the table is checked against the catalog after the batch
        with self.state.metrics.phase("plan"):
            plans = self.planner.plans(trigger)
        self.waiting.offer(table, plans)
        if trigger.origin in INLINE_ORIGINS:  # an operator's request is not held back by the limit
            self._round(None, only=table)
        elif self.waiting.per_round is None:
            self._round(None)
        self._collect()  # with inline workers these merges are done: recorded before the debt is read
        if trigger.merge_ids == () and trigger.only_rule is None:
            advice = self.planner.read_debt(table)
            if advice is not None:
                self.announcer.advise(advice)

    def _round(self, limit: int | None, only: str | None = None) -> int:
        """Start waiting plans, fair-share order, as slots allow (`only`: that table's, in order).
        The job's slots are one account for all its shards: this shard says which tables it has
        ready, and a plan whose turn another shard's table has first waits for the next round."""
        if self._draining:
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
        settings = self.state.configs.for_table
        ready = self.waiting.ready(self._startable)
        self.inflight.demand({p.table: settings(p.table).spark_pool(p.rule, p.pool) for p in ready})
        reasons = {}
        for table in self.waiting.tables():
            first = self.waiting.waiting(table)[0]
            why = self.inflight.blocked(first, settings(table).spark_pool(first.rule, first.pool))
            reasons[table] = why or "its turn for a merge slot (fair share)"
        self.state.control.on_waiting(reasons)

    def _startable(self, plan: MergePlan) -> bool:
        settings = self.state.configs.for_table(plan.table)
        return self.inflight.blocked(plan, settings.spark_pool(plan.rule, plan.pool)) is None

    def _start(self, plan: MergePlan) -> bool:
        """Start the plan on a worker; False if the job's slots gave its turn to another shard."""
        state = self.state
        settings = state.configs.for_table(plan.table)
        order = state.load_order(plan.table) if settings.upsert is not None else None

        def job() -> Finished:  # on a worker
            finished = self.runner.execute(plan, settings, order)
            fault_point(WITH_MERGES_IN_FLIGHT, finished.commit is not None and self.inflight.running() > 1)
            return finished

        with state.metrics.phase("commit"):  # with inline workers the merge runs here
            state.control.on_started(plan.table)
            started = self.inflight.start(plan, settings.spark_pool(plan.rule, plan.pool), job)
        if not started:
            state.control.on_finished(plan.table)
        return started

    def _collect(self) -> int:
        """Record, then announce, the merges that finished (each table's in commit order)."""
        finished = self.inflight.take_finished()
        for item in finished:
            self._finish(item)
        self._announce_unsent()
        return len(finished)

    def _finish(self, finished: Finished) -> None:
        """Into the catalog; its result queued for announcing."""
        plan, state = finished.plan, self.state
        state.control.on_finished(plan.table)
        outcome = self.runner.record(finished)
        if state.catalog.quarantined(plan.table) is not None:
            self.waiting.drop(plan.table)  # its queued plans would fail as this one did
        if outcome.stale:  # a concurrent writer changed the inputs: plan again, once
            self.recounted(catch_up(state.store, state.catalog, plan.table, state.unannounced, check=True))
            self._owed.add(plan.table)
        elif outcome.result.status is MergeStatus.SUCCEEDED and plan.table_wide:
            self._rewritten.add(plan.table)
        self._unsent.append(outcome)

    def _announce_unsent(self) -> None:
        """Announce the recorded outcomes in order; one Kafka refuses stays first in line."""
        if not self._unsent:
            return
        with self.state.metrics.phase("publish"):
            while self._unsent:
                self.announcer.announce(self._unsent[0])  # DeliveryError: kept, and the batch fails
                self._unsent.pop(0)

    def _quiesce(self, table: str) -> None:
        """Wait until the table has no merge in flight, recording each as it finishes."""
        while self.inflight.running(table):
            self.inflight.wait(1.0)
            self._collect()

    def _dispatch(self, trigger: Trigger) -> None:
        """A merging switch first; then the trigger's work, unless merging is off for the table
        or it is quarantined."""
        table, catalog = trigger.table, self.state.catalog
        if trigger.merging is not None:
            state = "on" if trigger.merging else "off"
            if catalog.switch_merging(table, trigger.merging):
                log.warning("table %s: merging turned %s by an operator", table, state)
            if trigger.merging and catalog.quarantine(table, None):
                self.planner.cool_down.succeeded(table)
                log.warning("table %s: released from quarantine by an operator", table)
            if not trigger.merging:
                return  # merges running and plans already queued still run (seed 003)
        if self._quarantined(table):
            self.state.stats.quarantined_attempts += 1
            return
        if not catalog.merging_enabled(table):
            self.state.stats.disabled_attempts += 1
            if trigger.origin == "request":
                log.warning(
                    "table %s: merging is off; the request is not run (compactor table enable)", table
                )
            return
        self._guarded(trigger)

    def _cancel_hung(self) -> None:
        """Cancel each merge running past its time bound (its Spark jobs, and any commit it would
        still make): it is reported failed, so its slot is freed and it cools down and is tried
        again, and a table that keeps hanging is quarantined like any that keeps failing."""
        now = time.monotonic()
        for plan, since in self.inflight.running_since():
            bound = self.state.configs.project.operations.merge_time_bound(plan.bytes_in).total_seconds()
            if now - since <= bound:
                continue
            why = (
                f"ran {now - since:.0f}s, past its bound of {bound:.0f}s for {plan.bytes_in} bytes; cancelled"
            )
            log.error("plan %s of table %s %s", plan.plan_id, plan.table, why)
            self.state.store.cancel(plan.plan_id)
            self.inflight.abandon(plan.plan_id, MergeCancelled(why))
            self.state.metrics.on_cancelled(plan.table)

    def _quarantined(self, table: str) -> bool:
        """Is the table quarantined? A config change since releases it."""
        note = self.state.catalog.quarantined(table)
        if note is None:
            return False
        _, fingerprint = quarantine_error(note)
        if fingerprint is not None and fingerprint != config_fingerprint(self.state.configs.for_table(table)):
            self.state.catalog.quarantine(table, None)
            self.planner.cool_down.succeeded(table)
            log.warning("table %s: released from quarantine: its config changed", table)
            return False
        return True

    def _guarded(self, trigger: Trigger) -> None:
        """One event's work; an internal failure is logged and counted, not fatal, and the
        table is left alone for the cool-down instead of failing again on every event.

        Kafka delivery failures still propagate: the batch must fail and be replayed, or
        an event would be lost. Rejections go on to the dead letters.
        """
        cool_down, key = self.planner.cool_down, f"table:{trigger.table}"
        if cool_down.active(key):
            self.state.stats.cooled_attempts += 1
            return
        try:
            self.work(trigger)
        except (DeliveryError, Rejected):
            raise
        except Exception as exc:
            self.state.stats.attempt_errors += 1
            cool_down.start(key, trigger.table, f"{type(exc).__name__}: {exc}")
            log.exception("table %s: its work failed; left alone for %s", trigger.table, cool_down.period)

    def _announce_new_tables(self) -> None:
        while self.admission.tables.new:
            self.announcer.table_appeared(self.admission.tables.new.pop())

    def close(self, wait: bool = True) -> None:
        """Stop the merge workers (`wait`: let the merges in flight finish first)."""
        self.inflight.workers.shutdown(wait=wait, cancel_futures=True)


def _envelope(row: Any) -> Envelope:
    value = bytes(row.value) if row.value is not None else b""
    key = bytes(row.key).decode(errors="replace") if row.key is not None else ""
    return Envelope(key, value, f"{row.topic}/{row.partition}/{row.offset}")

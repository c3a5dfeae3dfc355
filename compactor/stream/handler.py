"""The `foreachBatch` handler: decode -> admit -> plan -> commit -> announce.

Commit order, per plan: (1) the Delta commit that replaces the inputs, on a merge
worker; (2) the catalog update; (3) the `MergeResult` and the outputs'
`SegmentCompleted`, produced and acknowledged by Kafka, in the order the table's
commits were made. Merges run beside the batches (`merging.MergeScheduler`): a batch
admits its events, starts the merges they make possible and saves the catalog; Spark
then checkpoints its offsets, whether or not those merges are done. A crash replays
the batch and the restart attempts every table once (`DueTimes`), so a merge that was
in flight is planned again; deterministic plan ids, and each plan's id in its commit,
make repeated work a no-op. What a merge finishing, or time passing, makes possible is
taken up by the next batch or by `tick`, whichever comes first. One lock keeps the
job's state (catalog, plans, queues) to one thread at a time; workers only commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from compactor.delta.store import TableStore
from compactor.domain.segments import Segment
from compactor.errors import DeliveryError, Fenced, Rejected
from compactor.rules.due import Due
from compactor.stream.admission import Admission, KnownTables, table_of
from compactor.stream.announcer import Announcer
from compactor.stream.catalog_keeper import CatalogKeeper
from compactor.stream.control import Control
from compactor.stream.cool_down import CoolDown
from compactor.stream.due import DueTimes
from compactor.stream.fair_lock import FairRLock
from compactor.stream.job_view import JobView
from compactor.stream.key_indexes import KeyIndexes, Snapshot
from compactor.stream.log_keeper import LogKeeper
from compactor.stream.merging.scheduler import MergeScheduler
from compactor.stream.merging.waiting import INLINE_ORIGINS
from compactor.stream.outage_log import OutageLog
from compactor.stream.planning import TablePlanner
from compactor.stream.purging import OtherWriters, Purges, purge_segments, written_since
from compactor.stream.reporting import MetricsSink
from compactor.stream.runner import Runner, RunOutcome
from compactor.stream.stats import HandlerStats, TriggerCounts
from compactor.stream.sub_partition_delete import delete_value
from compactor.stream.switches import Held, TableSwitches
from compactor.stream.table_configs import TableConfigs
from compactor.stream.table_failures import TableFailures
from compactor.stream.triggers import DeadLetter, Envelope, Trigger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from compactor.catalog.fold import SegmentCatalog

log = logging.getLogger(__name__)

DUE_PER_TICK = 64  # tables attempted per tick for their due time; the rest in the next ticks
SWEEP_PER_TICK = 32  # tables start-up left unread, caught up per tick


@dataclass
class BatchHandler:
    """Callable passed to `foreachBatch`; owns the catalog for the job's lifetime."""

    admission: Admission
    planner: TablePlanner
    runner: Runner
    merges: MergeScheduler[RunOutcome]
    keeper: CatalogKeeper
    announcer: Announcer
    switches: TableSwitches
    purges: Purges
    other_writers: OtherWriters
    control: Control
    metrics: MetricsSink
    clock: Callable[[], datetime]
    # what the collaborators above use too, given here so that the handler asks, not reaches
    store: TableStore
    tables: KnownTables  # the tables the job knows, and those awaited
    due: DueTimes  # when each table is next attempted
    cool_down: CoolDown
    keys: KeyIndexes  # the upsert tables' key indexes
    failures: TableFailures
    counts: TriggerCounts = field(default_factory=TriggerCounts)
    lock: FairRLock = field(default_factory=FairRLock)  # the upkeep is not starved by batch and tick
    outage_log: OutageLog | None = None  # where the job says so when an outage pauses it
    logs: LogKeeper | None = None  # the maintainer of the tables' Delta logs (checkpoints)
    read_batch: BatchRead = field(default_factory=lambda: SparkRead())  # a micro-batch's records

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        with self.metrics.phase("collect"):
            rows, by = self.read_batch(batch)
        self.metrics.on_batch_read(by)
        log.info("batch %d: %d event(s)", batch_id, len(rows))
        self.process([_envelope(row) for row in rows])
        self.metrics.on_batch(time.monotonic() - started)

    def process(self, envelopes: Sequence[Envelope]) -> None:
        """One batch: what finished since the last is recorded first; then every valid event's
        work in order, the batch's dead letters, and the catalog caught up with the tables it
        touched and saved, before Spark records the offsets."""
        with self.lock:
            self.counts.events += len(envelopes)
            with self.metrics.phase("decode"):
                decoded, dead = self.admission.decode(envelopes)
            with self.metrics.phase("rows_present"):
                present = self.admission.rows_present(decoded)
            self._advance(limit=0)  # what finished since the last batch, before admission reads the catalog
            touched: set[str] = set()
            for item in decoded:
                self.keeper.current(table_of(item.event))
                try:
                    trigger = self.admission.admit(item.event, present)
                    self._announce_new_tables()
                    if trigger is not None:
                        touched.add(trigger.table)
                        self._dispatch(trigger)
                except Rejected as exc:
                    dead.append(DeadLetter(item.envelope, exc.reason, exc.detail))
            self._advance()  # with a merge limit: the batch's merges, in fair-share order
            with self.metrics.phase("publish"):
                self.announcer.dead_letters(dead)
                self.counts.dead_letters += len(dead)
            with self.metrics.phase("catalog"):
                self.keeper.save(touched)
        self.metrics.on_events(len(envelopes))  # counted once their work is saved

    def tick(self) -> None:
        """Between batches: record and announce the merges that finished, attempt the tables owed
        an attempt and those due with time (a bounded number per tick, so a batch waits no
        longer), start what waits for a slot, catch up a few unread tables, and save what that
        changed. Nothing here writes a table or waits on one: that is `upkeep`'s, on a thread of
        its own, so a slow write never holds up what comes due."""
        self.merges.cancel_hung()  # the watchdog's thread does this too; safe on either
        with self.lock:
            self._advance()
            due = [] if self.merges.draining else self.due.pop_due(self.clock(), DUE_PER_TICK)
            for table, when in due:
                self._attempt_due(table, when)
            if due:
                self._advance()
            self.keeper.sweep(SWEEP_PER_TICK)
            self.keeper.save_if_due()

    def upkeep(self) -> None:
        """The job's own background work, off the ticker's thread: fold what other writers
        committed, write the key index snapshots that are due, and purge one table's deleted
        rows. Each step holds the lock only to read or record, never while it writes."""
        with self.lock:
            catalog = self.catalog
            probe = self.other_writers.due(time.monotonic(), lambda: catalog.table_names)
            look = self.other_writers.look_for_awaited(time.monotonic())
            awaited = self.tables.awaited() if look else []
        store = self.store
        written = [t for t in probe if written_since(store, catalog, t)]  # file lookups, without the lock
        born = [t for t in awaited if store.exists(t)]
        with self.lock:
            for table in born:  # its events came before its first commit: found all the same
                if self.tables.found(table):
                    log.info("table %s: found in the warehouse after its events were refused", table)
                    written.append(table)
            self._announce_new_tables()
            for table in written:  # what they wrote is attempted now, not at the next event
                self.keeper.follow(table)
                self.due.lower(table, Due(self.clock(), "another writer committed to it"))
            busy = lambda table: self.merges.running(table) > 0 or self.keeper.is_unread(table)  # noqa: E731
            purge = None if self.merges.draining else self.purges.take(catalog, busy)
            snapshots = self.keys.snapshots_due()
        self._save_key_indexes(snapshots)
        if purge:
            self._purge(purge)
        if self.outage_log is not None:
            self.outage_log.sync(self.failures.outage())
        self.keeper.upkeep_store()  # the job's own catalog table: compacted, vacuumed

    def keep_logs(self) -> None:
        """Write the checkpoints that are due (never by a merge), on a thread of its own and
        without the job's lock: under a steady load the batches and the ticker held that lock so
        much that the upkeep waiting for it wrote no checkpoint in 26 minutes (bench/years.py)."""
        if self.logs is not None and not self.merges.draining:
            self.logs.keep(self.catalog.newest_versions())

    def log_line(self, table: str) -> str | None:
        """The table's Delta log as the maintainer last saw it, in words (None: not seen yet)."""
        facts = self.logs.facts().get(table) if self.logs is not None else None
        if facts is None or self.logs is None:
            return None
        at = (
            f"the checkpoint at version {facts.checkpoint_version}"
            if facts.checkpoint_version >= 0
            else "none"
        )
        return (
            f"log: {facts.commits_since_checkpoint} commit(s) since {at}; the job's maintainer wrote "
            f"{self.logs.written} checkpoint(s) since it started, the most behind {self.logs.most_behind} "
            "commit(s) when written"
        )

    def outage_line(self) -> str | None:
        """The outage that pauses this shard's attempts, in words (None: no outage)."""
        outage = self.failures.outage()
        return outage.line() if outage is not None else None

    def _save_key_indexes(self, snapshots: list[Snapshot]) -> None:
        """Write the key index snapshots taken under the lock, outside it (a batch may run)."""
        for snapshot in snapshots:
            try:
                taken = snapshot.taken
                self.store.save_key_index(snapshot.table, snapshot.version, taken.write, taken.keys)
            except Exception:  # the next tick tries again; the index itself is whole
                log.exception("table %s: saving its key index snapshot failed", snapshot.table)
                with self.lock:
                    self.keys.unsaved(snapshot)
                continue
            with self.lock:
                self.keys.saved(snapshot)

    def work(self, trigger: Trigger) -> None:
        """Plan the trigger's work and hand the plans to the scheduler (after a requested
        sub-partition delete); then read the table's debt, and advise its producers."""
        table = trigger.table
        if trigger.delete_value is not None:
            self.merges.quiesce(table)  # the delete rewrites the table's segments: no merge of it in flight
            if delete_value(self.runner, table, trigger.delete_value):
                self.keeper.check_at_save(table)
        with self.metrics.phase("plan"):
            planned = self.planner.plans(trigger)
        if planned.plans and self.switches.refused(table):  # its first merge here: can one rewrite it?
            self.counts.quarantined_attempts += 1
            return
        self.merges.offer(table, planned.plans, at_once=trigger.origin in INLINE_ORIGINS, whole=planned.whole)
        if trigger.merge_ids == () and trigger.only_rule is None:
            advice = self.planner.read_debt(table)
            if advice is not None:
                self.announcer.advise(advice)

    def until_due(self, ceiling: float) -> float:
        """Seconds until the next table comes due, at most `ceiling`."""
        with self.lock:
            at = self.due.next_at()
            if at is None:
                return ceiling
            return max(0.0, min(ceiling, (at - self.clock()).total_seconds()))

    def settle(self, timeout: float = 600.0) -> None:
        """Tick until no merge is in flight and nothing is due now (`--until-idle`, tests);
        TimeoutError past `timeout`."""
        deadline = time.monotonic() + timeout
        self.tick()
        self.upkeep()
        while self.merges.running() or self.until_due(1.0) == 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.merges.running()} merge(s) still in flight after {timeout}s")
            if self.merges.running():
                self.merges.wait(1.0)
            self.tick()
            self.upkeep()
        with self.lock:  # what the merges did, durable before the caller moves on
            self.keeper.save()

    def fence(self) -> None:
        """The shard was lost: nothing is written for it from here on, by any thread: no table
        commit (a merge in flight ends uncommitted; the shard's next holder plans it again), no
        purge, sub-partition delete, VACUUM or snapshot, no catalog save, no event published."""
        self.store.fence()
        self.keeper.fence()
        self.announcer.fence()

    def drain(self, timeout: float) -> int:
        """Start no more merges; wait up to `timeout` for those in flight (each recorded and
        announced as it finishes), then stop the workers. Returns how many were left running:
        their plans are made again at the next start."""
        with self.lock:
            self.merges.draining = True
        deadline = time.monotonic() + timeout
        while self.merges.running() and time.monotonic() < deadline:
            self.merges.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            self.tick()
        left = self.merges.running()
        self.close(wait=False)
        if self.keeper.fenced:  # a lost shard: its next holder saves its catalog and snapshots
            return left
        try:
            with self.lock:
                self.keeper.save()
                snapshots = self.keys.snapshots_due(force=True)
        except Exception as exc:  # the warehouse out of reach: the stop goes on, the tables' logs hold it all
            log.warning(
                "the catalog could not be saved at the stop (%s: %s); the next start reads what it "
                "missed from the tables' logs",
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
            )
            return left
        self._save_key_indexes(snapshots)  # the next start takes them back rather than scan
        return left

    def close(self, wait: bool = True) -> None:
        """Stop the merge workers (`wait`: let the merges in flight finish first)."""
        self.merges.close(wait)
        self.read_batch.close()

    # -- what the job lets others read ----------------------------------------------------------

    @property
    def catalog(self) -> SegmentCatalog:
        return self.keeper.catalog

    @property
    def configs(self) -> TableConfigs:
        return self.planner.configs

    @property
    def stats(self) -> HandlerStats:
        """The job's counters, read now."""
        return HandlerStats.read(
            self.counts,
            self.planner.counts,
            self.runner.counts,
            self.admission.redelivered,
            self.purges.purged,
        )

    def view(self) -> JobView:
        """What observers (metrics, the summary line) may read of the running job."""
        return JobView(
            self.catalog,
            self.configs,
            self.control,
            self.clock,
            lambda: self.stats,
            self.keys.all_facts,
            self.store.kept_commit_bytes,
        )

    # -- one trigger's work ---------------------------------------------------------------------

    def _advance(self, limit: int | None = None) -> None:
        if self.failures.paused():  # an outage: what finished is recorded, nothing starts
            limit = 0
        turn = self.merges.turn(limit)
        while owed := self.merges.advance(turn):  # tables whose plans went stale: planned again
            for table in owed:
                self._dispatch(Trigger(table, "replan"))

    def _attempt_due(self, table: str, due: Due) -> None:
        """What came due: a schedule's rule, then (as for any due time) every rule of the table."""
        if self.catalog.version(table) is None:  # the table left the warehouse
            self.due.forget(table)
            return
        self.keeper.current(table)
        log.info("table %s: due (%s)", table, due.why)
        self.counts.due_attempts += 1
        if due.rule is not None:
            self._dispatch(Trigger(table, "schedule", only_rule=due.rule))
        self._dispatch(Trigger(table, "due"))
        if self.due.get(table) is None:  # not attempted (off, cooling): when it may be
            self.due.lower(table, self.cool_down.next_end(table))

    def _dispatch(self, trigger: Trigger) -> None:
        """An operator's cancel, or a merging switch, first; then the trigger's work, unless the
        table is held (merging off, or quarantined)."""
        if trigger.cancel_plan is not None:
            self._cancel(trigger.table, trigger.cancel_plan, trigger.request_id)
            return
        if self.switches.flip(trigger):
            return
        outage = self.failures.outage_pause()
        if outage is not None:  # attempted when the pause ends, without an event
            self.counts.paused_attempts += 1
            self.due.lower(trigger.table, Due(outage, "the outage's pause ends"))
            return
        held = self.switches.held(trigger.table)
        if held is Held.QUARANTINED:
            self.counts.quarantined_attempts += 1
            return
        if held is Held.DISABLED:
            self.counts.disabled_attempts += 1
            if trigger.origin == "request":
                log.warning(
                    "table %s: merging is off; the request is not run (compactor table enable)", trigger.table
                )
            return
        self._guarded(trigger)

    def _cancel(self, table: str, plan_id: str, request_id: str | None) -> None:
        """An operator's cancel of a merge in flight, whether or not the table is held or cooling
        (stopping a merge is what an operator may want most then). Its failure is recorded and
        announced at the batch's next advance."""
        why = f"cancelled by an operator (request {request_id})"
        if self.merges.cancel(plan_id, why, table=table) is None:
            log.info(
                "table %s: no merge runs under plan %s here, nothing cancelled (request %s): it may "
                "have finished, or not have started yet",
                table,
                plan_id,
                request_id,
            )

    def _guarded(self, trigger: Trigger) -> None:
        """One event's work; an internal failure is logged and counted, not fatal, and the
        table is left alone for the cool-down instead of failing again on every event.

        Kafka delivery failures still propagate: the batch must fail and be replayed, or
        an event would be lost. Rejections go on to the dead letters.
        """
        cool_down, key = self.cool_down, f"table:{trigger.table}"
        if cool_down.active(key):
            self.counts.cooled_attempts += 1
            return
        try:
            self.work(trigger)
        except (DeliveryError, Rejected):
            raise
        except Fenced:  # the shard was lost: its next holder catches the table up from Delta
            return
        except Exception as exc:  # backed off and quarantined as a failing merge is
            self.counts.attempt_errors += 1
            self.failures.failed(trigger.table, key, exc, trigger.only_rule, "its planning")

    def _purge(self, segments: list[Segment]) -> None:
        """Purge one table's segments (a batch may run meanwhile), then check the table: the
        purge commit is folded and the segments recounted; a failed purge waits to be retried."""
        # a config gone bad since the purge was planned: the job's setting
        certify = self.configs.setting(segments[0].table, lambda s: s.certify_merges, None)
        purged = purge_segments(self.store, self.metrics, segments, certify)
        with self.lock:
            self.purges.done(purged, segments)
            if purged is not None:
                self.keeper.check(segments[0].table)

    def _announce_new_tables(self) -> None:
        while self.tables.new:
            self.announcer.table_appeared(self.tables.new.pop())


class BatchRead(Protocol):
    """How a micro-batch's records are read: rows with Spark's Kafka source's `key`, `value`,
    `topic`, `partition` and `offset`, and who read them: `driver` or `spark`."""

    def __call__(self, batch: DataFrame) -> tuple[Sequence[Any], str]: ...

    def close(self) -> None: ...


class SparkRead:
    """The records through Spark: a job of executor tasks over the batch's offsets."""

    def __call__(self, batch: DataFrame) -> tuple[Sequence[Any], str]:
        return spark_rows(batch), "spark"

    def close(self) -> None:
        pass


def spark_rows(batch: DataFrame) -> list[Any]:
    return batch.select("key", "value", "topic", "partition", "offset").collect()


def _envelope(row: Any) -> Envelope:
    value = bytes(row.value) if row.value is not None else b""
    key = bytes(row.key).decode(errors="replace") if row.key is not None else ""
    return Envelope(key, value, f"{row.topic}/{row.partition}/{row.offset}")

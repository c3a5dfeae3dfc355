"""The `foreachBatch` handler: decode -> admit -> plan -> commit -> announce.

Commit order, per plan: (1) the Delta commit that replaces the inputs, (2) the
catalog update, (3) the `MergeResult` and the outputs' `SegmentCompleted`,
produced and acknowledged by Kafka. Only when the handler returns does Spark
checkpoint the batch's offsets, so a crash anywhere replays the batch;
deterministic plan ids and Delta's txnAppId make the replay a no-op where work
was already done. Each step is a collaborator the handler was given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from compactor.catalog.store import CatalogStore
from compactor.codec.events import Codec
from compactor.config.tables import ProjectConfig
from compactor.delta.store import TableStore
from compactor.domain.events import MergeStatus
from compactor.domain.plans import MergePlan
from compactor.errors import DeliveryError, Rejected
from compactor.kafka.settings import KafkaSettings
from compactor.stream.admission import Admission, KnownTables
from compactor.stream.announcer import Announcer, Publisher
from compactor.stream.fair_share import BatchMerges
from compactor.stream.planning import CoolDown, TablePlanner
from compactor.stream.recovery import Unannounced, catch_up, recover
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.runner import RetryPolicy, Runner
from compactor.stream.state import StreamState
from compactor.stream.stats import HandlerStats
from compactor.stream.sub_partition_delete import delete_value
from compactor.stream.table_configs import TableConfigs
from compactor.stream.triggers import DeadLetter, Envelope, Trigger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass
class BatchHandler:
    """Callable passed to `foreachBatch`; owns the catalog for the job's lifetime."""

    state: StreamState
    admission: Admission
    planner: TablePlanner
    runner: Runner
    announcer: Announcer
    catalog_store: CatalogStore
    merges: BatchMerges = field(default_factory=lambda: BatchMerges(None, lambda _: 1.0))
    # tables a table-wide rewrite replaced: checked against the table when the batch saves,
    # since the overwrite also took whatever was loaded between planning and its read
    _rewritten: set[str] = field(default_factory=set)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        with self.state.metrics.phase("collect"):
            rows = batch.select("key", "value", "topic", "partition", "offset").collect()
        log.info("batch %d: %d event(s)", batch_id, len(rows))
        self.process([_envelope(row) for row in rows])
        self.state.metrics.on_batch(time.monotonic() - started)

    def process(self, envelopes: Sequence[Envelope]) -> None:
        """One batch: every valid event's work in order, the batch's dead letters, then the
        catalog caught up with the tables it touched and saved, before Spark records the offsets."""
        self.state.stats.events += len(envelopes)
        phase = self.state.metrics.phase
        with phase("decode"):
            decoded, dead = self.admission.decode(envelopes)
        with phase("rows_present"):
            present = self.admission.rows_present(decoded)
        touched: set[str] = set(self.merges.owed())  # a batch's merge limit left their plans over
        for table in sorted(touched):
            self._dispatch(Trigger(table, "replan"))
        for item in decoded:
            try:
                trigger = self.admission.admit(item.event, present)
                self._announce_new_tables()
                if trigger is not None:
                    touched.add(trigger.table)
                    self._dispatch(trigger)
            except Rejected as exc:
                dead.append(DeadLetter(item.envelope, exc.reason, exc.detail))
        for plan in self.merges.drain():  # with a merge limit: fair share across the tables
            self._run(plan, may_replan=True)
        with phase("publish"):
            self.announcer.dead_letters(dead)
        with phase("catalog"):
            self.save(touched)
        self.state.metrics.on_events(len(envelopes))  # counted once their work is saved

    def save(self, tables: set[str]) -> None:
        """Fold the touched tables' newest commits into the catalog, then make it durable."""
        for table in sorted(tables | self._rewritten):
            catch_up(
                self.state.store, self.state.catalog, table, self.state.unannounced, table in self._rewritten
            )
        self._rewritten.clear()
        self.state.unannounced.report(self.state.catalog)
        self.catalog_store.save(self.state.catalog.take_changes())

    def work(self, trigger: Trigger) -> None:
        """Plan the trigger's work and run each plan (after a requested sub-partition delete)."""
        if trigger.delete_value is not None and delete_value(
            self.runner, trigger.table, trigger.delete_value
        ):
            self._rewritten.add(trigger.table)  # the table is checked against the catalog after the batch
        with self.state.metrics.phase("plan"):
            plans = self.planner.plans(trigger)
        for plan in self.merges.take(trigger, plans):
            self._run(plan, may_replan=True)
        if trigger.merge_ids == () and trigger.only_rule is None:
            advice = self.planner.read_debt(trigger.table)
            if advice is not None:
                self.announcer.advise(advice)

    def _run(self, plan: MergePlan, may_replan: bool) -> None:
        phase = self.state.metrics.phase
        with phase("commit"):
            outcome = self.runner.run(plan)
        with phase("publish"):
            self.announcer.announce(outcome)
        if plan.table_wide and outcome.result.status is MergeStatus.SUCCEEDED:
            self._rewritten.add(plan.table)
        if outcome.stale and may_replan:  # a concurrent writer changed the inputs: plan again, once
            catch_up(self.state.store, self.state.catalog, plan.table, self.state.unannounced, check=True)
            for again in self.planner.plans(Trigger(plan.table, "replan")):
                self._run(again, may_replan=False)

    def _dispatch(self, trigger: Trigger) -> None:
        """A merging switch first; then the trigger's work, unless merging is off for the table."""
        table, catalog = trigger.table, self.state.catalog
        if trigger.merging is not None:
            state = "on" if trigger.merging else "off"
            if catalog.switch_merging(table, trigger.merging):
                log.warning("table %s: merging turned %s by an operator", table, state)
            if not trigger.merging:
                return
        if not catalog.merging_enabled(table):
            self.state.stats.disabled_attempts += 1
            if trigger.origin == "request":
                log.warning(
                    "table %s: merging is off; the request is not run (compactor table enable)", table
                )
            return
        self._guarded(trigger)

    def _guarded(self, trigger: Trigger) -> None:
        """One event's work; an internal failure is logged and counted, not fatal, and the
        table is left alone for the cool-down instead of failing again on every event.

        Kafka delivery failures still propagate: the batch must fail and be
        replayed, or an event would be lost. Rejections go on to the dead letters.
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


def _envelope(row: Any) -> Envelope:
    value = bytes(row.value) if row.value is not None else b""
    key = bytes(row.key).decode(errors="replace") if row.key is not None else ""
    return Envelope(key, value, f"{row.topic}/{row.partition}/{row.offset}")


def assemble(
    store: TableStore,
    catalog_store: CatalogStore,
    config: ProjectConfig,
    topics: KafkaSettings,
    publisher: Publisher,
    codec: Codec,
    clock: Callable[[], datetime],
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    metrics: MetricsSink | None = None,
) -> BatchHandler:
    """Wire a handler and recover: the catalog read from its store and caught up with the
    tables, published configs adopted, and merges a crash left unannounced announced."""
    unannounced = Unannounced(clock)
    catalog, new_tables = recover(store, catalog_store, unannounced)
    configs = TableConfigs(config, store, catalog)
    state = StreamState(store, catalog, configs, clock, HandlerStats(), unannounced, metrics or NoMetrics())
    state.configs.load_recorded(catalog, new_tables)
    announcer = Announcer(publisher, codec, topics, state)
    announcer.announce_unannounced(catalog)
    catalog_store.save(catalog.take_changes())
    cool_down = CoolDown(clock, config.operations.cool_down, catalog)
    return BatchHandler(
        state,
        Admission(codec, state, KnownTables(store, catalog.table_names), catalog_store),
        TablePlanner(state, cool_down, defer_over_lag=config.operations.defer_optional_over_lag),
        Runner(state, cool_down, retry, sleep),
        announcer,
        catalog_store,
        BatchMerges(config.operations.max_merges_per_batch, lambda t: configs.for_table(t).priority),
    )

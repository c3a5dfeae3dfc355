"""The job wired: a handler over a table store, a catalog store and a publisher, recovered.

`job.build_handler` gives it Spark and Delta and Kafka; the unit tests an
in-memory store and a recording publisher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from compactor.catalog.fold import SegmentCatalog
from compactor.catalog.store import CatalogStore
from compactor.catalog.view import CatalogView
from compactor.codec.events import Codec
from compactor.config.rules import RuleName
from compactor.config.tables import DEFAULT_CHECKPOINT_EVERY, ProjectConfig, TableSettings
from compactor.delta.store import TableStore
from compactor.domain.plans import MergePlan
from compactor.errors import Rejected
from compactor.kafka.settings import KafkaSettings
from compactor.rules.due import Due
from compactor.stream.admission import Admission, KnownTables
from compactor.stream.announcer import Announcer, Publisher, ResultsOnTopic
from compactor.stream.catalog_keeper import CatalogKeeper
from compactor.stream.catalog_timing import TimedCatalogStore
from compactor.stream.control import Control
from compactor.stream.cool_down import CoolDown
from compactor.stream.due import DueTimes
from compactor.stream.handler import BatchHandler
from compactor.stream.log_keeper import LogKeeper
from compactor.stream.merge_desk import StreamDesk
from compactor.stream.merging.inflight import InFlight
from compactor.stream.merging.scheduler import MergeScheduler
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.waiting import WaitingPlans
from compactor.stream.merging.workers import Workers, thread_workers
from compactor.stream.outages import Outages
from compactor.stream.planning import TablePlanner
from compactor.stream.purging import OtherWriters, Purges
from compactor.stream.recovery import EAGER_TABLES, Unannounced, recover
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.runner import RetryPolicy, Runner
from compactor.stream.switches import TableSwitches
from compactor.stream.table_configs import TableConfigs
from compactor.stream.table_failures import TableFailures

log = logging.getLogger(__name__)

T = TypeVar("T")


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
    workers: Workers | None = None,
    slots: Slots | None = None,
    owns: Callable[[str], bool] = lambda _: True,
    on_topic: ResultsOnTopic | None = None,
    eager: int = EAGER_TABLES,
    shard: int = 0,
) -> BatchHandler:
    """Wire a handler and recover: the catalog read from its store and caught up with the
    tables (`eager` known ones at once, the rest later: `recovery.Unread`), published configs
    adopted, and merges a crash left unannounced announced. `workers` run the merges (default:
    `max_concurrent_merges` threads; `InlineWorkers` runs each where it starts, as the unit
    tests do). A shard's handler shares the job's `slots` and recovers only the tables it `owns`.
    `on_topic` reads back which results the topic holds: a restart announces each result once."""
    unannounced, sink, control = Unannounced(clock), metrics or NoMetrics(), Control()
    catalog_store = TimedCatalogStore(catalog_store, sink)
    catalog, new_tables, unread = recover(store, catalog_store, unannounced, owns, eager)
    configs = TableConfigs(config, store, catalog)
    configs.load_recorded(catalog, new_tables)
    announcer = Announcer(publisher, codec, topics, catalog, control, clock, sink, on_topic)
    announcer.announce_unannounced([t for t in catalog.table_names if t not in unread])
    catalog_store.save(catalog.take_changes())
    operations, due, started = config.operations, DueTimes(), clock()
    for table in catalog.table_names:  # a merge in flight at a crash is planned again; due times derived
        due.set(table, Due(started, "the job started: every table is attempted once"), started)
    cool_down = CoolDown(clock, operations.cool_down, catalog, due)
    cool_down.quarantine_after = operations.quarantine_after
    inflight = _inflight(config, store, workers, slots, shard)
    purges = Purges(lambda table: _setting(configs, table, lambda s: s.purge_deleted_ratio, None), clock)
    keeper = CatalogKeeper(store, catalog, catalog_store, unannounced, unread, announcer, purges, sink)
    outages = Outages(clock, operations.cool_down)
    failures = TableFailures(cool_down, catalog, configs, sink, outages)
    failures.died_during(lambda table, plan_id: _committed(store, catalog, table, plan_id))
    runner = Runner(store, catalog, configs, clock, cool_down, sink, retry, sleep, failures)
    desk = StreamDesk(runner, announcer, keeper, configs, inflight.running)
    merges = MergeScheduler(
        inflight,
        WaitingPlans(lambda t: configs.for_table(t).priority, operations.max_merges_per_batch),
        desk,
        control,
        lambda plan: operations.merge_time_bound(bytes_read(catalog, plan)).total_seconds(),
        sink.phase,
    )
    handler = BatchHandler(
        admission=Admission(
            codec,
            catalog,
            configs,
            KnownTables(store, catalog.table_names, owns),
            catalog_store,
            control,
            clock,
            sink,
        ),
        planner=TablePlanner(
            catalog,
            configs,
            store,
            control,
            clock,
            cool_down,
            sink,
            defer_over_lag=operations.defer_optional_over_lag,
            off_peak=operations.off_peak,
            due=due,
            running=lambda table: inflight.booked(table),
            kept=catalog_store,
        ),
        runner=runner,
        merges=merges,
        keeper=keeper,
        announcer=announcer,
        switches=TableSwitches(catalog, configs, cool_down, store.refusal, sink),
        purges=purges,
        other_writers=OtherWriters(operations.check_other_writers_every.total_seconds()),
        control=control,
        metrics=sink,
        clock=clock,
    )
    handler.logs = LogKeeper(
        store,
        lambda table: _setting(configs, table, lambda s: s.checkpoint_every, DEFAULT_CHECKPOINT_EVERY),
        sink,
        hold=lambda table: _setting(configs, table, lambda s: s.hold_checkpoint_interval, False),
    )
    # segments whose deleted rows a crash left unpurged: reported, and queued again
    keeper.recounted([s for table in catalog.table_names for s in catalog.segments(table) if s.deleted])
    return handler


def bytes_read(catalog: CatalogView, plan: MergePlan) -> int:
    """What a plan's merge reads: its inputs, or for upsert compaction (which judges its inputs'
    rows against every row of the table) the whole table. Its time bound grows with it."""
    if plan.rule == RuleName.UPSERT_COMPACTION:
        return max(plan.bytes_in, sum(s.bytes for s in catalog.segments(plan.table)))
    return plan.bytes_in


def _setting(configs: TableConfigs, table: str, read: Callable[[TableSettings], T], fallback: T) -> T:
    """One of a table's settings, or `fallback` while the table has no valid config (nothing of
    it is purged; its log is still checkpointed at Delta's default interval)."""
    try:
        return read(configs.for_table(table))
    except Rejected:
        return fallback


def job_slots(config: ProjectConfig) -> Slots:
    """Merges side by side: `max_concurrent_merges` slots, each Spark pool's own limit, and
    each table's `quota` of merge time."""
    pools = config.spark_pools()

    def quota(table: str) -> float:
        try:
            return config.for_table(table).quota
        except Rejected:  # no valid config: it merges nothing anyway
            return 1.0

    return Slots(
        config.operations.max_concurrent_merges,
        lambda pool: pools[pool].concurrency if pool in pools else None,
        quota,
    )


def _committed(store: TableStore, catalog: SegmentCatalog, table: str, plan_id: str) -> bool:
    """Whether the plan's commit is in the table (one the catch-up folded, or older)."""
    if catalog.was_executed(table, plan_id):
        return True
    try:
        return store.committed_version(table, plan_id) is not None
    except Exception:  # not to be told (the table is gone?): the merge counts as one that died
        log.warning("table %s: could not tell whether plan %s committed", table, plan_id, exc_info=True)
        return False


def _inflight(
    config: ProjectConfig, store: TableStore, workers: Workers | None, slots: Slots | None, shard: int
) -> InFlight:
    slots = slots or job_slots(config)
    return InFlight(workers or thread_workers(slots.limit), slots, store.committed_version, shard)

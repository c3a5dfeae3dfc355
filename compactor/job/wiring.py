"""The composition root: a shard's handler wired over a table store, a catalog store and a
publisher, between the two halves of its start-up (`startup`).

`build_handler` gives it Spark, Delta and Kafka; the stream's unit tests give `assemble` an
in-memory store and a recording publisher.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from pyspark.sql import SparkSession

from compactor.catalog.store import CatalogStore
from compactor.catalog.view import CatalogView
from compactor.codec.events import Codec
from compactor.config.rules import RuleName
from compactor.config.tables import DEFAULT_CHECKPOINT_EVERY, ProjectConfig
from compactor.delta.spark_store import SparkTableStore
from compactor.delta.store import TableStore
from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
from compactor.domain.clock import now_utc
from compactor.domain.plans import MergePlan
from compactor.errors import Rejected
from compactor.job.batch_read import DriverRead
from compactor.job.query import Shard
from compactor.job.startup import Resumed, recover_catalog, resume
from compactor.kafka.codecs import codec_for
from compactor.kafka.producer import EventProducer
from compactor.kafka.results_log import results_on_topic
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from compactor.stream.admission import Admission, KnownTables
from compactor.stream.announcer import Announcer, Publisher, ResultsOnTopic
from compactor.stream.catalog_keeper import CatalogKeeper
from compactor.stream.control import Control
from compactor.stream.cool_down import CoolDown
from compactor.stream.due import DueTimes
from compactor.stream.handler import BatchHandler
from compactor.stream.key_indexes import KeyIndexes
from compactor.stream.log_keeper import LogKeeper
from compactor.stream.merge_desk import StreamDesk
from compactor.stream.merging.inflight import InFlight
from compactor.stream.merging.scheduler import MergeScheduler
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.waiting import WaitingPlans
from compactor.stream.merging.workers import SharedWorkers, Workers, thread_workers
from compactor.stream.outages import Outages
from compactor.stream.planning import TablePlanner
from compactor.stream.purging import OtherWriters, Purges
from compactor.stream.recovery import EAGER_TABLES
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.runner import RetryPolicy, Runner
from compactor.stream.switches import TableSwitches
from compactor.stream.table_configs import TableConfigs
from compactor.stream.table_failures import TableFailures


def build_handler(
    spark: SparkSession,
    config: ProjectConfig,
    warehouse: Path | str,
    kafka: KafkaSettings,
    producer: EventProducer | None = None,
    codec: Codec | None = None,
    clock: Callable[[], datetime] = now_utc,
    metrics: MetricsSink | None = None,
    shard: Shard | None = None,
) -> BatchHandler:
    """The handler on Spark + Delta and Kafka, its topics created, recovered from the tables
    (a `shard`'s: the tables it owns, its part of the catalog, the job's merge slots)."""
    ensure_topics(kafka, kafka.topics)
    codec = codec or codec_for(kafka)
    handler = assemble(
        SparkTableStore(
            spark,
            warehouse,
            write_tasks=config.operations.merge_write_tasks,
            driver_max_bytes=config.operations.driver_merge_max_bytes,
            certify=config.operations.certify_merges,
        ),
        DeltaCatalogStore(spark, warehouse, scope=shard.scope if shard else None),
        config,
        kafka,
        producer or EventProducer(kafka),
        codec,
        clock,
        metrics=metrics,
        workers=SharedWorkers(shard.workers) if shard else None,
        slots=shard.slots if shard else None,
        owns=shard.scope.owns if shard and shard.scope else lambda _: True,
        on_topic=lambda table, plan_ids: results_on_topic(kafka, codec, table, plan_ids),
        shard=shard.index if shard else 0,
        outages=shard.outages if shard else None,
    )
    if config.operations.driver_batch_reads:
        handler.read_batch = DriverRead(kafka)
    return handler


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
    outages: Outages | None = None,
) -> BatchHandler:
    """Wire a shard's handler between the two halves of its start-up (`startup`): the catalog
    read from its store and caught up with the tables (`eager` known ones at once, the rest
    later: `recovery.Unread`); then, wired, published configs adopted, merges a crash left
    unannounced announced, and the rest the last run left dealt with. `workers` run the merges (default:
    `max_concurrent_merges` threads; `InlineWorkers` runs each where it starts, as the unit
    tests do). A shard's handler shares the job's `slots` and recovers only the tables it `owns`.
    `on_topic` reads back which results the topic holds: a restart announces each result once.
    `outages` are what the shard's earlier starts in this process saw: an outage that stopped the
    shard's query is still known to its next start, which goes on pausing and then probing."""
    sink, control, started = metrics or NoMetrics(), Control(), clock()
    recovered = recover_catalog(store, catalog_store, sink, clock, owns, eager)
    catalog, catalog_store, unread = recovered.catalog, recovered.catalog_store, recovered.unread
    configs = TableConfigs(config, store, catalog)
    announcer = Announcer(publisher, codec, topics, catalog, control, clock, sink, on_topic)
    operations, due = config.operations, DueTimes()
    cool_down = CoolDown(clock, operations.cool_down, catalog, due)
    cool_down.quarantine_after = operations.quarantine_after
    inflight = _inflight(config, store, workers, slots, shard)
    purges = Purges(lambda table: configs.setting(table, lambda s: s.purge_deleted_ratio, None), clock)
    keeper = CatalogKeeper(
        store, catalog, catalog_store, recovered.unannounced, unread, announcer, purges, sink
    )
    if outages is None:
        outages = Outages(clock, operations.cool_down)
    elif outages.current is not None:  # this start's metrics say so from the first scrape
        sink.on_outage(outages.current.kind)
    failures = TableFailures(cool_down, catalog, configs, sink, outages)
    runner = Runner(store, catalog, configs, clock, cool_down, sink, retry, sleep, failures)
    keys = KeyIndexes(catalog, store, catalog_store)  # planning keeps them, merges are checked against them
    desk = StreamDesk(runner, announcer, keeper, configs, inflight.running, keys, operations.certify_merges)
    merges = MergeScheduler(
        inflight,
        WaitingPlans(lambda t: configs.for_table(t).priority, operations.max_merges_per_batch),
        desk,
        control,
        lambda plan: operations.merge_time_bound(bytes_read(catalog, plan)).total_seconds(),
        sink.phase,
    )
    tables = KnownTables(store, catalog.table_names, owns)
    planner = TablePlanner(
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
        keys=keys,
    )
    handler = BatchHandler(
        admission=Admission(codec, catalog, configs, tables, catalog_store, control, clock, sink),
        planner=planner,
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
        store=store,
        tables=tables,
        due=due,
        cool_down=cool_down,
        keys=planner.keys,
        failures=failures,
    )
    handler.logs = LogKeeper(
        store,
        lambda table: configs.setting(table, lambda s: s.checkpoint_every, DEFAULT_CHECKPOINT_EVERY),
        sink,
        hold=lambda table: configs.setting(table, lambda s: s.hold_checkpoint_interval, False),
    )
    resume(recovered, Resumed(configs, announcer, due, failures, keeper), store, started)
    return handler


def bytes_read(catalog: CatalogView, plan: MergePlan) -> int:
    """What a plan's merge reads: its inputs, or for upsert compaction (which judges its inputs'
    rows against every row of the table) the whole table. Its time bound grows with it."""
    if plan.rule == RuleName.UPSERT_COMPACTION:
        return max(plan.bytes_in, sum(s.bytes for s in catalog.segments(plan.table)))
    return plan.bytes_in


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


def _inflight(
    config: ProjectConfig, store: TableStore, workers: Workers | None, slots: Slots | None, shard: int
) -> InFlight:
    slots = slots or job_slots(config)
    return InFlight(workers or thread_workers(slots.limit), slots, store.committed_version, shard)

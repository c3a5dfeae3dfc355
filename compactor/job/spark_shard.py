"""One shard as a Spark job runs it: a handler over the shard's tables and a streaming query over
its partitions, with the threads beside them (ticker, vacuum schedule, the minute's summary)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from compactor.catalog.store import StoreScope
from compactor.config.tables import ProjectConfig
from compactor.delta.files import HadoopFiles
from compactor.delta.warehouse.shard_record import ShardRecord, shard_checkpoint
from compactor.job.janitor import Janitor
from compactor.job.query import Shard, run_until_idle, start_query, whole_topic
from compactor.job.summary import Summary
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.shards import ShardLayout
from compactor.stream.job_view import JobView
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.workers import Workers
from compactor.stream.outage_log import OutageLog
from compactor.stream.outages import Outages
from compactor.stream.reporting import MetricsSink


def shard_of_job(
    layout: ShardLayout,
    record: ShardRecord | None,
    index: int,
    checkpoint: Path | str,
    slots: Slots,
    workers: Workers,
    outages: Outages | None = None,
) -> Shard:
    """Shard `index` as this job runs it. Before the warehouse has a shard record, the one shard
    reads the whole topic into the checkpoint location itself, as the job always did."""
    if record is None:
        source = whole_topic(layout.topic)
        scope = None
    else:
        source = {
            "assign": layout.assign(index),
            "startingOffsets": layout.starting_offsets(index, record.offsets),
        }
        scope = StoreScope(layout.name(index), layout.owns(index)) if layout.shards > 1 else None
    checkpoint_at = shard_checkpoint(checkpoint, record, index)
    return Shard(index, scope, source, checkpoint_at, slots, workers, outages)


class SparkShard:
    """Built with its handler recovered; `start` runs its query (or `run_until_idle` drains
    it), `stop` ends it."""

    def __init__(
        self,
        spark: SparkSession,
        config: ProjectConfig,
        warehouse: str,
        kafka: KafkaSettings,
        producer: EventProducer,
        shard: Shard,
        metrics: MetricsSink,
        watch: Callable[[JobView], None],
        on_stop: Callable[[], None] = lambda: None,
    ) -> None:
        self.index = shard.index
        self.shard = shard
        self.spark = spark
        self.kafka = kafka
        self.on_stop = on_stop
        self.handler = build_handler(spark, config, warehouse, kafka, producer, metrics=metrics, shard=shard)
        files = HadoopFiles(spark)
        self.handler.outage_log = OutageLog(files, warehouse, f"shard-{shard.index}")
        watch(self.handler.view())
        self.query: StreamingQuery | None = None
        self._threads: list[threading.Event] = []

    def start(self) -> SparkShard:
        """The query, and beside it the VACUUM schedule and a line a minute."""
        self.query = start_query(
            self.spark, self.handler, self.kafka, self.shard.checkpoint, shard=self.shard
        )
        handler = self.handler
        janitor = Janitor(
            handler.catalog, handler.configs, handler.keeper.store, handler.clock, handler.metrics
        )
        self._threads = [janitor.start(), Summary(handler.view()).start()]
        return self

    def run_until_idle(self) -> int:
        return run_until_idle(self.spark, self.handler, self.kafka, self.shard.checkpoint, self.shard)

    def failure(self) -> str | None:
        if self.query is None or self.query.isActive:
            return None
        error = self.query.exception()
        return str(error) if error is not None else "it stopped"

    def stop(self, grace: float, lost: bool = False) -> int:
        """The query stopped between batches, then the merges in flight get `grace` seconds to
        finish and be announced; the rest are left (their slots go back to the job's other
        shards, their plans are made again by the shard's next holder). Returns how many.
        `lost`: the lease went with the session: nothing more is committed, no grace."""
        if lost:
            self.handler.fence()
            grace = 0.0
        if self.query is not None and self.query.isActive:
            self.query.stop()  # the running batch finishes; Spark records no offsets for an unfinished one
        for stop in self._threads:
            stop.set()
        left = self.handler.drain(grace)
        if self.handler.failures.outage() is not None:  # it ends with the shard (outage_log.py)
            self.handler.metrics.on_outage(None)
        self.handler.merges.inflight.release()
        self.on_stop()
        return left

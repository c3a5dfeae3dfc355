"""A shard's streaming query: Kafka `SegmentCompleted` events -> foreachBatch(handler), on Spark,
with a ticker beside it; or drained once (`run_until_idle`).

`compactor run` starts it (`job.run`), also under spark-submit (`streaming_jobs/compact_segments.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from compactor.catalog.store import StoreScope
from compactor.job.ticker import Ticker
from compactor.kafka.settings import KafkaSettings
from compactor.stream.handler import BatchHandler
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.workers import Workers
from compactor.stream.outages import Outages

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard as a job runs it: its tables and catalog part, its Kafka source, its
    checkpoint; the merge slots and worker threads it shares with the job's other shards."""

    index: int
    scope: StoreScope | None  # None: the one shard of an unsharded job, every table its own
    source: dict[str, str]  # the Kafka source's `assign` and `startingOffsets`
    checkpoint: str
    slots: Slots
    workers: Workers
    # what the shard's starts in this process know of an outage: the one that failed its query
    # is not declared again, or forgotten, by the next start
    outages: Outages | None = None

    @property
    def query_name(self) -> str:
        return f"segment-compactor-{self.scope.name}" if self.scope else "segment-compactor"


def whole_topic(topic: str) -> dict[str, str]:
    """The Kafka source options of a query that reads every partition of `topic` (one shard)."""
    return {"subscribe": topic, "startingOffsets": "earliest"}


def start_query(
    spark: SparkSession,
    handler: BatchHandler,
    kafka: KafkaSettings,
    checkpoint: Path | str,
    available_now: bool = False,
    trigger_interval: str = "1 second",
    foreach: Callable[[DataFrame, int], None] | None = None,
    shard: Shard | None = None,
) -> StreamingQuery:
    """Start the streaming query; `available_now` drains the backlog and stops. A continuous
    query gets a `Ticker` beside it while it runs: merges that finish between batches are
    announced, and what comes due with time is attempted, without waiting for an event.

    `foreach` replaces the handler as the foreachBatch function (a benchmark wraps the handler
    to time it); the ticker still drives the handler itself. A `shard`'s query reads its
    partitions only, into its own checkpoint (`shard.checkpoint`, whatever `checkpoint` says)."""
    reader = spark.readStream.format("kafka")
    source = shard.source if shard else whole_topic(kafka.segments_topic)
    for key, value in (kafka.spark_options() | source).items():
        reader = reader.option(key, value)
    stream = reader.option("failOnDataLoss", "true").load()
    location = shard.checkpoint if shard else str(checkpoint)
    writer = stream.writeStream.foreachBatch(foreach or handler).option("checkpointLocation", location)
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=trigger_interval)
    )
    query = writer.queryName(shard.query_name if shard else "segment-compactor").start()
    if not available_now:
        Ticker(handler, alive=lambda: bool(query.isActive)).start()
    return query


def run_until_idle(
    spark: SparkSession,
    handler: BatchHandler,
    kafka: KafkaSettings,
    checkpoint: Path | str,
    shard: Shard | None = None,
) -> int:
    """Drain the topic and the merges it starts (and what is due now), re-run while merges keep
    emitting events, stop when a run sees none and its merges are done.

    For batch-style schedules (cron) and crash tests. Returns the number of runs.
    """
    runs = 0
    while True:
        before = progress(handler)
        start_query(spark, handler, kafka, checkpoint, available_now=True, shard=shard).awaitTermination()
        handler.settle()
        runs += 1
        if progress(handler) == before:
            return runs


def progress(handler: BatchHandler) -> tuple[int, int]:
    """Events processed and merges recorded (committed, failed or stale) so far."""
    stats = handler.stats
    return stats.events, stats.merges + stats.replayed_merges + stats.failed_merges + stats.replans

"""The compaction job: Kafka `SegmentCompleted` events -> foreachBatch(handler), on Spark and Delta.

`compactor run` starts it here, also under spark-submit (`streaming_jobs/compact_segments.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from compactor.codec.events import Codec
from compactor.config.tables import ProjectConfig
from compactor.delta.catalog_table import DeltaCatalogStore
from compactor.delta.spark_store import SparkTableStore
from compactor.domain.clock import now_utc
from compactor.kafka.codecs import codec_for
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from compactor.stream.assemble import assemble
from compactor.stream.handler import BatchHandler
from compactor.stream.reporting import MetricsSink
from compactor.stream.ticker import Ticker

log = logging.getLogger(__name__)


def build_handler(
    spark: SparkSession,
    config: ProjectConfig,
    warehouse: Path | str,
    kafka: KafkaSettings,
    producer: EventProducer | None = None,
    codec: Codec | None = None,
    clock: Callable[[], datetime] = now_utc,
    metrics: MetricsSink | None = None,
) -> BatchHandler:
    """The handler on Spark + Delta and Kafka, its topics created, recovered from the tables."""
    ensure_topics(kafka, kafka.topics)
    return assemble(
        SparkTableStore(spark, warehouse),
        DeltaCatalogStore(spark, warehouse),
        config,
        kafka,
        producer or EventProducer(kafka),
        codec or codec_for(kafka),
        clock,
        metrics=metrics,
    )


def start_query(
    spark: SparkSession,
    handler: BatchHandler,
    kafka: KafkaSettings,
    checkpoint: Path | str,
    available_now: bool = False,
    trigger_interval: str = "1 second",
    foreach: Callable[[DataFrame, int], None] | None = None,
) -> StreamingQuery:
    """Start the streaming query; `available_now` drains the backlog and stops. A continuous
    query gets a `Ticker` beside it while it runs: merges that finish between batches are
    announced, and what comes due with time is attempted, without waiting for an event.

    `foreach` replaces the handler as the foreachBatch function (a benchmark wraps the handler
    to time it); the ticker still drives the handler itself."""
    reader = spark.readStream.format("kafka")
    for key, value in kafka.spark_options().items():
        reader = reader.option(key, value)
    stream = (
        reader.option("subscribe", kafka.segments_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
    )
    writer = stream.writeStream.foreachBatch(foreach or handler).option("checkpointLocation", str(checkpoint))
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=trigger_interval)
    )
    query = writer.queryName("segment-compactor").start()
    if not available_now:
        Ticker(handler, alive=lambda: bool(query.isActive)).start()
    return query


def run_until_idle(
    spark: SparkSession, handler: BatchHandler, kafka: KafkaSettings, checkpoint: Path | str
) -> int:
    """Drain the topic and the merges it starts (and what is due now), re-run while merges keep
    emitting events, stop when a run sees none and its merges are done.

    For batch-style schedules (cron) and crash tests. Returns the number of runs.
    """
    runs = 0
    while True:
        before = progress(handler)
        start_query(spark, handler, kafka, checkpoint, available_now=True).awaitTermination()
        handler.settle()
        runs += 1
        if progress(handler) == before:
            return runs


def progress(handler: BatchHandler) -> tuple[int, int]:
    """Events processed and merges recorded (committed, failed or stale) so far."""
    stats = handler.state.stats
    return stats.events, stats.merges + stats.replayed_merges + stats.failed_merges + stats.replans

"""The compaction job: Kafka `SegmentCompleted` events -> foreachBatch(handler).

Run it with `compactor run ...` or `spark-submit streaming_jobs/compact_segments.py ...`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from compactor.codec import default_codec
from compactor.config import ProjectConfig, load_config_file
from compactor.handler import SegmentEventHandler
from compactor.kafka_io import EventProducer, KafkaSettings, ensure_topics

log = logging.getLogger(__name__)


def build_handler(
    spark: SparkSession,
    config: ProjectConfig,
    warehouse: Path,
    kafka: KafkaSettings,
    checkpoint: Path | None = None,
) -> SegmentEventHandler:
    """The handler, with its small state (announced versions) kept beside the checkpoint."""
    ensure_topics(kafka, [kafka.segments_topic, kafka.results_topic, kafka.dead_letter_topic])
    state = checkpoint.with_name(checkpoint.name + ".compactor") if checkpoint else None
    return SegmentEventHandler(
        spark, config, warehouse, kafka, EventProducer(kafka), default_codec(), state_dir=state
    )


def run_until_idle(
    spark: SparkSession, handler: SegmentEventHandler, kafka: KafkaSettings, checkpoint: Path
) -> int:
    """Drain the topic, re-run while merges keep emitting events, stop when a run sees none.

    For batch-style schedules (cron) and crash tests. Returns the number of runs.
    """
    runs = 0
    while True:
        seen = handler.stats.events
        query = start_query(spark, handler, kafka, checkpoint, available_now=True)
        query.awaitTermination()
        runs += 1
        if handler.stats.events == seen:
            return runs


def start_query(
    spark: SparkSession,
    handler: SegmentEventHandler,
    kafka: KafkaSettings,
    checkpoint: Path,
    available_now: bool = False,
    trigger_interval: str = "1 second",
) -> StreamingQuery:
    """Start the streaming query; `available_now` drains the backlog and stops."""
    reader = spark.readStream.format("kafka")
    for key, value in kafka.spark_options().items():
        reader = reader.option(key, value)
    stream = (
        reader.option("subscribe", kafka.segments_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
    )
    writer = stream.writeStream.foreachBatch(handler).option("checkpointLocation", str(checkpoint))
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=trigger_interval)
    )
    return writer.queryName("segment-compactor").start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    args = parser.parse_args(argv)
    from compactor.spark_session import build_spark

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = load_config_file(args.config)
    spark = build_spark(fair_pools=config.pool_names(), scratch_dir=args.checkpoint.parent)
    kafka = KafkaSettings(args.bootstrap_servers, security=config.kafka)
    handler = build_handler(spark, config, args.warehouse, kafka, args.checkpoint)
    try:
        start_query(spark, handler, kafka, args.checkpoint).awaitTermination()
    finally:
        handler.producer.close()


if __name__ == "__main__":
    main()

"""Helpers to drive the real streaming job and read real topics in tests."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Message, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.handler import SegmentEventHandler
from compactor.kafka_io import KafkaSettings
from streaming_jobs.compact_segments import start_query


def consume_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Message]:
    """Every message on `topic` up to its current end (read by offsets, no group rebalance)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        ends: dict[int, int] = {}
        starts = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                ends[p] = high
                starts.append(TopicPartition(topic, p, low))
        consumer.assign(starts)
        messages: list[Message] = []
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            messages.append(msg)
            if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                ends.pop(msg.partition(), None)
        assert not ends, f"timed out reading {topic}"
        return sorted(messages, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


@dataclass
class JobRunner:
    """Runs the real query with availableNow until a run consumes no event."""

    spark: SparkSession
    handler: SegmentEventHandler
    kafka: KafkaSettings
    checkpoint: Path

    def run_once(self) -> int:
        before = self.handler.stats.events
        query = start_query(self.spark, self.handler, self.kafka, self.checkpoint, available_now=True)
        query.awaitTermination(300)
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        return self.handler.stats.events - before

    def run_until_quiet(self, max_runs: int = 30) -> int:
        runs = 0
        while self.run_once() > 0:
            runs += 1
            assert runs < max_runs, "the job did not settle"
        return runs


def checksum(df: DataFrame, exclude: tuple[str, ...] = ("segment_id",)) -> tuple[int, int]:
    """(row count, order-independent checksum of the rows without `exclude`)."""
    cols = [c for c in df.columns if c not in exclude]
    row = (
        df.select(F.xxhash64(*cols).alias("h"))
        .agg(F.count("*").alias("n"), F.sum(F.col("h").cast("decimal(38,0)")).alias("s"))
        .first()
    )
    assert row is not None
    return int(row["n"]), int(row["s"] or 0)

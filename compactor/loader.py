"""Loader API: write rows as a new segment (one Delta append), then announce it.

Producers that write Delta themselves must follow the same contract (see the
README): rows carry the `segment_id` column, the append commits before the
`SegmentCompleted` event is produced, and the event is keyed by the table name.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.codec import Codec, default_codec, now_utc
from compactor.delta_executor import write_segment
from compactor.domain import Segment, TimeRange, validate_segment_id
from compactor.events import SegmentCompleted
from compactor.kafka_io import EventProducer, KafkaSettings


def new_segment_id(table: str, start: datetime) -> str:
    return f"{table}-{start:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def load_segment(
    spark: SparkSession,
    warehouse: Path | str,
    kafka: KafkaSettings,
    producer: EventProducer,
    table: str,
    rows: DataFrame,
    start: datetime,
    end: datetime,
    segment_id: str | None = None,
    sub_partitions: Iterable[str] = (),
    codec: Codec | None = None,
) -> Segment:
    """Append `rows` to `table` as one segment covering [start, end) and publish it.

    Returns the segment as committed (exact record count and bytes). The event is
    produced only after the Delta commit, and only returns once Kafka acknowledged it.
    """
    time_range = TimeRange(start, end)
    segment = Segment(
        id=validate_segment_id(segment_id or new_segment_id(table, time_range.start)),
        table=table,
        range=time_range,
        loaded_at=now_utc(),
        sub_partitions=frozenset(sub_partitions),
    )
    committed = write_segment(spark, warehouse, segment, rows)
    event = SegmentCompleted(committed, produced_at=now_utc())
    data = (codec or default_codec()).encode_segment_completed(event)
    producer.send_all([(kafka.segments_topic, table, data, None)])
    return committed


def sample_rows(spark: SparkSession, start: datetime, end: datetime, count: int, seed: int = 0) -> DataFrame:
    """Deterministic sample sales rows with event times spread over [start, end)."""
    time_range = TimeRange(start, end)
    span = int(time_range.duration.total_seconds())
    first = int(time_range.start.timestamp())
    return spark.range(count).select(
        F.timestamp_seconds(F.lit(first) + F.floor(F.col("id") * span / max(count, 1))).alias("event_time"),
        ((F.col("id") * 7919 + seed) % 1000).cast("int").alias("customer_id"),
        (((F.col("id") * 104729 + seed) % 100000) / 100).cast("decimal(10,2)").alias("amount"),
    )

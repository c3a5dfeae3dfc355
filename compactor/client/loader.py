"""Loader API: write rows as a new segment (one Delta append), then announce it.

Producers that write Delta themselves must follow the same contract (docs/producers-consumers.md,
"The event contract"): rows carry the `segment_id` column, the append commits before the
`SegmentCompleted` event is produced, and the event is keyed by the table name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.codec.events import Codec
from compactor.config.sub_partitions import SubPartitionConfig
from compactor.config.tables import TableSettings
from compactor.delta.log.reads import read_catalog, table_exists
from compactor.delta.predicates import sub_partition_literal
from compactor.delta.table_ops.writes import write_segment, write_sub_partition
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentAction, SegmentCompleted
from compactor.domain.segments import Segment, SegmentState, TimeRange, new_segment_id, validate_segment_id
from compactor.errors import CompactorError
from compactor.kafka.codecs import codec_for
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings


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
    built_with: str = "",
    indexes: Iterable[str] = (),
) -> Segment:
    """Append `rows` to `table` as one segment covering [start, end) and publish it.

    Returns the segment as committed (exact record count and bytes). The event is
    produced only after the Delta commit, and only returns once Kafka acknowledged it.
    `built_with` records the layout the rows were built to (see `config.built_with.layout_record`);
    `indexes` names the indexes built for the segment (Kylin's per-segment indexes): only segments
    that built the same ones merge.
    """
    time_range = TimeRange(start, end)
    segment = Segment(
        id=validate_segment_id(segment_id or new_segment_id(table, time_range.start)),
        table=table,
        range=time_range,
        loaded_at=now_utc(),
        sub_partitions=frozenset(sub_partitions),
        built_with=built_with,
        indexes=frozenset(indexes),
    )
    committed = write_segment(spark, warehouse, segment, rows)
    _Sink(spark, warehouse, kafka, producer, codec or codec_for(kafka)).publish(
        SegmentCompleted(committed, now_utc())
    )
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


@dataclass(frozen=True)
class _Sink:
    """Where a load goes: the tables under the warehouse, and the topic that hears of it."""

    spark: SparkSession
    warehouse: Path | str
    kafka: KafkaSettings
    producer: EventProducer
    codec: Codec

    def publish(self, event: SegmentCompleted) -> None:
        data = self.codec.encode_segment_completed(event)
        self.producer.send_all([(self.kafka.segments_topic, event.segment.table, data, None)])


def _sub_partition(settings: TableSettings, table: str, value: str) -> SubPartitionConfig:
    config = settings.sub_partition
    if config is None:
        raise CompactorError(f"table {table} declares no sub-partition column")
    if not config.enabled:
        raise CompactorError(
            f"table {table}: multi-level partitioning is off (sub_partition.enabled: false); "
            "turn it on to build sub-partition values"
        )
    if value not in config.values:
        raise CompactorError(
            f"table {table}: sub-partition value {value!r} is not declared for column {config.column} "
            f"(declared: {', '.join(config.values) or 'none'}); add it to the table config first"
        )
    return config


def load_sub_partition(
    spark: SparkSession,
    warehouse: Path | str,
    kafka: KafkaSettings,
    producer: EventProducer,
    settings: TableSettings,
    table: str,
    rows: DataFrame,
    start: datetime,
    end: datetime,
    value: str,
    segment_id: str | None = None,
    codec: Codec | None = None,
    indexes: Iterable[str] = (),
) -> Segment:
    """Build one sub-partition of [start, end): a new segment, or added to the segment of that range.

    Adding to an existing segment is announced first (the value LOADING, so the
    compactor leaves the segment alone), written in one Delta commit, then
    announced ONLINE with the segment's new totals. Every row must hold `value`.
    """
    config = _sub_partition(settings, table, value)
    time_range = TimeRange(start, end)
    known = (
        read_catalog(spark, warehouse, table).segments(table) if table_exists(spark, warehouse, table) else []
    )
    existing = next((s for s in known if s.range == time_range), None)
    if existing is None:
        segment = Segment(
            id=validate_segment_id(segment_id or new_segment_id(table, time_range.start)),
            table=table,
            range=time_range,
            loaded_at=now_utc(),
            sub_partitions=frozenset({value}),
            indexes=frozenset(indexes),
        )
        action = SegmentAction.CREATE
    else:
        if value in existing.sub_partitions:
            raise CompactorError(
                f"segment {existing.id} already holds {config.column} = {value!r}; refresh it instead"
            )
        segment = replace(existing, sub_partitions=existing.sub_partitions | {value}, sub_partition_states=())
        action = SegmentAction.ADD_SUB_PARTITION
    busy = SegmentState.LOADING if action is SegmentAction.ADD_SUB_PARTITION else None
    sink = _Sink(spark, warehouse, kafka, producer, codec or codec_for(kafka))
    return _write_slice(sink, segment, rows, config, value, action, busy)


def refresh_sub_partition(
    spark: SparkSession,
    warehouse: Path | str,
    kafka: KafkaSettings,
    producer: EventProducer,
    *,
    settings: TableSettings,
    table: str,
    segment_id: str,
    value: str,
    rows: DataFrame,
    codec: Codec | None = None,
) -> Segment:
    """Replace one sub-partition's rows of a segment atomically (REFRESHING, then ONLINE)."""
    config = _sub_partition(settings, table, value)
    segment = read_catalog(spark, warehouse, table).get(table, segment_id)
    if segment is None:
        raise CompactorError(f"table {table} has no segment {segment_id}")
    if value not in segment.sub_partitions:
        raise CompactorError(
            f"segment {segment_id} has not built {config.column} = {value!r}; load it instead"
        )
    sink = _Sink(spark, warehouse, kafka, producer, codec or codec_for(kafka))
    return _write_slice(
        sink, segment, rows, config, value, SegmentAction.REFRESH_SUB_PARTITION, SegmentState.REFRESHING
    )


def _write_slice(
    sink: _Sink,
    segment: Segment,
    rows: DataFrame,
    config: SubPartitionConfig,
    value: str,
    action: SegmentAction,
    busy: SegmentState | None,
) -> Segment:
    """Announce the value busy (if the segment already exists), write its slice in one
    commit, then announce the segment as Delta now records it (exact totals, ONLINE)."""
    if busy is not None:
        announced = replace(segment, sub_partition_states=((value, busy),))
        sink.publish(SegmentCompleted(announced, now_utc(), action=action))
    literal = sub_partition_literal(config, value)
    write_sub_partition(sink.spark, sink.warehouse, segment, rows, config.column, literal)
    committed = read_catalog(sink.spark, sink.warehouse, segment.table).get(segment.table, segment.id)
    if committed is None:
        raise CompactorError(f"segment {segment.id} is missing from the Delta history after its commit")
    sink.publish(SegmentCompleted(committed, now_utc(), action=action))
    return committed

"""The driver reads a micro-batch's events over the offsets Spark planned for it: on real Spark and
Kafka, each batch's records are exactly those Spark's own read gives, and a batch whose plan is
not a Kafka read goes through Spark, said once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from compactor.job.batch_read import DriverRead
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from compactor.spark.batch_offsets import kafka_ranges
from compactor.stream.handler import spark_rows

pytestmark = pytest.mark.integration


def as_tuples(rows: Any) -> list[tuple[Any, ...]]:
    return [
        (
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            r.topic,
            r.partition,
            r.offset,
        )
        for r in rows
    ]


def test_each_batch_is_read_by_the_driver_exactly_as_spark_reads_it(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"))
    topic = kafka.segments_topic
    ensure_topics(kafka, [topic], partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    read = DriverRead(kafka)
    seen: list[tuple[list[Any], list[tuple[Any, ...]], list[tuple[Any, ...]]]] = []

    def batch_function(batch: Any, batch_id: int) -> None:
        by_driver, by = read(batch)
        assert by == "driver"
        seen.append((kafka_ranges(batch) or [], as_tuples(by_driver), as_tuples(spark_rows(batch))))

    def load(keys: range) -> None:
        for i in keys:  # partition 2 gets none in the second round
            value = None if i == 4 else f"v{i}".encode()
            producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % 2 if i >= 6 else i % 3)
        assert producer.flush(10) == 0
        query = (
            spark.readStream.format("kafka")
            .options(**kafka.spark_options(), subscribe=topic, startingOffsets="earliest")
            .load()
            .writeStream.foreachBatch(batch_function)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)

    load(range(6))
    load(range(6, 10))
    read.close()
    assert [sorted(ranges) for ranges, _, _ in seen] == [  # Spark plans partitions in its own order
        [(topic, 0, 0, 2), (topic, 1, 0, 2), (topic, 2, 0, 2)],
        [(topic, 0, 2, 4), (topic, 1, 2, 4)],
    ]
    for _, by_driver, by_spark in seen:
        assert by_driver == sorted(by_spark, key=lambda r: (r[3], r[4]))
    assert [len(by_driver) for _, by_driver, _ in seen] == [6, 4]
    assert (b"k4", None) in [r[:2] for r in seen[0][1]]  # a tombstone stays one
    assert (read.driver_reads, read.spark_reads) == (2, 0)


def test_a_batch_of_another_plan_is_read_through_spark_and_said_once(
    spark: Any, kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [(b"k", b"v", "t", 0, 7), (None, None, "t", 1, 8)]
    batch = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    read = DriverRead(KafkaSettings(kafka_bootstrap))
    with caplog.at_level(logging.WARNING, logger="compactor.job.batch_read"):
        assert kafka_ranges(batch) is None
        for _ in range(2):
            rows_read, by = read(batch)
            assert (as_tuples(rows_read), by) == (rows, "spark")
    read.close()
    assert (read.driver_reads, read.spark_reads) == (0, 2)
    assert [r.getMessage() for r in caplog.records] == [
        "a micro-batch read through Spark (1 so far, 0 by the driver): its plan is not a plain read of "
        "Spark's Kafka source"
    ]

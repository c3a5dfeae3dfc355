"""The warm-up a started job runs while it recovers (`compactor/job/run.py`'s `warm_up`): Spark's
Kafka source planned for the segments topic with the query's options, no record read, and a
failure only logged (it is a head start, never a reason for the job to stop)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from compactor.job.run import planned_partitions, warm_up
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics

pytestmark = pytest.mark.integration


def test_the_segments_topic_is_planned_partition_by_partition_and_nothing_is_consumed(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    kafka = KafkaSettings(kafka_bootstrap, unique("warm-segments"))
    ensure_topics(kafka, [kafka.segments_topic], partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition in range(3):
        producer.produce(kafka.segments_topic, value=b"event", partition=partition)
    assert producer.flush(10) == 0

    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup
    before = len(jobs())
    assert planned_partitions(spark, kafka) == 3
    warm_up(spark, kafka, spark_reads=False)
    assert len(jobs()) == before, "planned, not run: no Spark job read the topic"
    warm_up(spark, kafka, spark_reads=True)
    assert len(jobs()) == before + 1, "where Spark reads the batches, one tiny job warms its path"


class RefusingReader:
    def format(self, name: str) -> RefusingReader:
        raise RuntimeError(f"Failed to find data source: {name}")


class SessionWithoutKafka:
    read = RefusingReader()

    def range(self, n: int) -> Any:
        raise AssertionError("a failed warm-up goes no further")


def test_a_failed_warm_up_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="compactor.job.run"):
        warm_up(SessionWithoutKafka(), KafkaSettings("127.0.0.1:9", "segments"), spark_reads=True)
    assert "warming Spark up failed: Failed to find data source: kafka" in caplog.text

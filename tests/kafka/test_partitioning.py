"""A table's partition from its name: Kafka's murmur2, as the Java client (and Spark) computes it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.kafka.partitioning import murmur2, partition_of
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from tests.helpers.streaming import consume_all

# Kafka's own test vectors for Utils.murmur2 (signed 32-bit results)
KAFKA_VECTORS = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS.items())
def test_murmur2_gives_kafka_s_values(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected & 0xFFFFFFFF


@given(st.text(min_size=1), st.integers(1, 1000))
def test_every_table_has_one_partition_among_those_there_are(table: str, partitions: int) -> None:
    placed = partition_of(table, partitions)
    assert 0 <= placed < partitions
    assert placed == partition_of(table, partitions)


def test_a_partition_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="partitions: 0"):
        partition_of("t", 0)


@pytest.mark.integration
def test_the_producer_puts_each_table_where_partition_of_says(
    kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"))
    ensure_topics(kafka, [kafka.segments_topic], partitions=6)
    tables = [f"table_{n}" for n in range(24)]
    producer = EventProducer(kafka)
    landed = producer.send_all([(kafka.segments_topic, t, t.encode(), None) for t in tables])
    producer.close()
    consumed = consume_all(kafka_bootstrap, kafka.segments_topic)
    placed = {m.value().decode(): m.partition() for m in consumed}
    assert placed == {t: partition_of(t, 6) for t in tables}
    assert len(set(placed.values())) > 1, "the tables spread over the partitions"
    at = {m.value().decode(): (m.partition(), m.offset()) for m in consumed}
    assert landed == [at[t] for t in tables], "send_all says where each message landed, in order"

"""The driver's read of a micro-batch's offsets, on the real broker: exactly the records inside the
ranges, as Spark's source gives them (aborted transactional records included, the markers that
end a transaction stepped over), and a clear refusal when a range cannot be read."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from compactor.domain.offsets import OffsetRange
from compactor.errors import RangeNotRead
from compactor.kafka.range_reader import KafkaRecord, RangeReader
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics

pytestmark = pytest.mark.integration


@pytest.fixture
def reader(kafka_bootstrap: str) -> Iterator[RangeReader]:
    reader = RangeReader(KafkaSettings(kafka_bootstrap), timeout_s=2.0)
    yield reader
    reader.close()
    reader.close()  # a second close is a no-op


def filled(bootstrap: str, topic: str, per_partition: int) -> None:
    """`per_partition` records in each of three partitions: key `p<partition>-<i>`, value `v<i>`
    (every fourth a tombstone, no value)."""
    ensure_topics(KafkaSettings(bootstrap), [topic], partitions=3)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(3):
        for i in range(per_partition):
            value = None if i % 4 == 3 else f"v{i}".encode()
            producer.produce(topic, key=f"p{partition}-{i}".encode(), value=value, partition=partition)
    assert producer.flush(10) == 0


def expected(topic: str, partition: int, offsets: range) -> list[KafkaRecord]:
    return [
        KafkaRecord(
            f"p{partition}-{i}".encode(), None if i % 4 == 3 else f"v{i}".encode(), topic, partition, i
        )
        for i in offsets
    ]


def test_the_records_inside_the_ranges_in_partition_then_offset_order(
    kafka_bootstrap: str, unique: Callable[[str], str], reader: RangeReader
) -> None:
    topic = unique("ranges")
    filled(kafka_bootstrap, topic, 10)
    ranges = [OffsetRange(topic, 2, 7, 10), OffsetRange(topic, 0, 2, 5), OffsetRange(topic, 1, 4, 4)]
    assert reader.read(ranges) == expected(topic, 0, range(2, 5)) + expected(topic, 2, range(7, 10))
    # the same consumer, the next batch's ranges: read from their start, not from where it stopped
    assert reader.read([OffsetRange(topic, 0, 0, 1), OffsetRange(topic, 1, 9, 10)]) == expected(
        topic, 0, range(0, 1)
    ) + expected(topic, 1, range(9, 10))
    assert reader.read([]) == []


def test_aborted_records_are_read_as_spark_reads_them_and_markers_stepped_over(
    kafka_bootstrap: str, unique: Callable[[str], str], reader: RangeReader
) -> None:
    topic = unique("transactions")
    ensure_topics(KafkaSettings(kafka_bootstrap), [topic], partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"aborted", value=b"a", partition=0)
    assert producer.flush(10) == 0  # on the broker before the abort: unsent records are dropped
    producer.abort_transaction(30)  # offset 0 the record, 1 the abort marker
    producer.begin_transaction()
    producer.produce(topic, key=b"kept", value=b"k", partition=0)
    producer.commit_transaction(30)  # offset 2 the record, 3 the commit marker
    got = reader.read([OffsetRange(topic, 0, 0, 4)])
    assert [(r.key, r.offset) for r in got] == [(b"aborted", 0), (b"kept", 2)]
    # a range ending in a marker with records after it: the next record says it was read
    assert [(r.key, r.offset) for r in reader.read([OffsetRange(topic, 0, 0, 2)])] == [(b"aborted", 0)]


def test_a_range_past_the_log_end_is_refused_within_the_timeout(
    kafka_bootstrap: str, unique: Callable[[str], str], reader: RangeReader
) -> None:
    topic = unique("short")
    filled(kafka_bootstrap, topic, 2)
    with pytest.raises(RangeNotRead, match=rf"\('{topic}', 0\)\] not read to their ends within 2 s"):
        reader.read([OffsetRange(topic, 0, 0, 5)])
    # the consumer is still good for the next read
    assert reader.read([OffsetRange(topic, 1, 0, 2)]) == expected(topic, 1, range(0, 2))


def test_two_ranges_of_one_partition_are_refused(reader: RangeReader) -> None:
    with pytest.raises(RangeNotRead, match="two ranges of one partition"):
        reader.read([OffsetRange("t", 0, 0, 2), OffsetRange("t", 0, 2, 4)])


def test_a_topic_the_broker_does_not_have_is_refused_by_name(
    unique: Callable[[str], str], reader: RangeReader
) -> None:
    topic = unique("absent")
    # refused from the topic's metadata, not after waiting out the timeout for records
    with pytest.raises(RangeNotRead, match=rf"topic '{topic}': .*UNKNOWN_TOPIC_OR_PART"):
        reader.read([OffsetRange(topic, 0, 0, 1)])

"""Announce a segment with your own Kafka client: the compactor's codec makes the event's bytes.

A producer that writes Delta itself (see "The event contract") announces each
segment after its commit, keyed by the table's name:

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/own_kafka_client.py
"""

import os
from datetime import UTC, datetime, timedelta

from confluent_kafka import Producer

from compactor import Codec, Segment, SegmentCompleted, TimeRange

servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
topic = os.environ.get("SEGMENTS_TOPIC", "compactor.segments")

start = datetime(2024, 1, 1, tzinfo=UTC)
segment = Segment(
    "orders-20240101",
    "orders",
    TimeRange(start, start + timedelta(days=1)),
    loaded_at=datetime.now(UTC),
    records=100,
    bytes=4096,
)  # the rows are committed to Delta first, every one with segment_id = "orders-20240101"
codec = Codec()  # Avro single-object encoding; Codec(registry=...) for the Confluent wire format
value = codec.encode_segment_completed(SegmentCompleted(segment, produced_at=datetime.now(UTC)))
assert codec.decode_segment_completed(value).segment == segment  # consumers decode the same way

# keyed by table, with Java's partitioner: one table's events in one partition, whoever produces
producer = Producer(
    {"bootstrap.servers": servers, "enable.idempotence": True, "partitioner": "murmur2_random"}
)
producer.produce(topic, key=segment.table, value=value)
assert producer.flush(30) == 0, "the event was not acknowledged"
print(f"announced {segment.id} on {topic}")

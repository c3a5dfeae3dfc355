"""Read a recorded segments topic back: the loads it announced, in the order they came.

For `compactor plan --replay-topic`: the consumer joins no group and commits
nothing (it assigns every partition itself), reads from a time, an offset or the
beginning up to the end the topic had when it started, and keeps the completion
events of loads. The job's own events (merge and refresh outputs, requests,
configs) are counted and left out: replaying a candidate config means letting it
make its own merges.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

from compactor.codec.events import Codec
from compactor.domain.events import SegmentAction, SegmentCompleted
from compactor.domain.segments import Origin, Segment
from compactor.errors import CompactorError
from compactor.kafka.failures import kafka_reason
from compactor.kafka.settings import KafkaSettings

POLL_SECONDS = 1.0


@dataclass
class Recorded:
    """What the topic held from the starting point: the loads, and how many events were not."""

    loads: list[Segment] = field(default_factory=list)
    skipped: int = 0  # the job's own outputs, requests, configs, sub-partition changes
    undecodable: int = 0


def read_loads(
    kafka: KafkaSettings, topic: str, codec: Codec, start: datetime | int | None = None, timeout: float = 10.0
) -> Recorded:
    """The load events of `topic` from `start` (a time, an offset of every partition, or None:
    the beginning) to its end when called."""
    consumer = Consumer(
        kafka.librdkafka(
            **{"group.id": f"compactor-replay-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
        )
    )
    try:
        partitions = _partitions(consumer, topic, kafka.bootstrap_servers, timeout)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout)[1] for p in partitions}
        starting = [TopicPartition(topic, p, _offset(start)) for p in partitions]
        if isinstance(start, datetime):
            starting = consumer.offsets_for_times(starting, timeout)
        consumer.assign(starting)
        return _consume(consumer, codec, ends, {tp.partition: tp.offset for tp in starting})
    except KafkaException as exc:
        raise CompactorError(f"cannot read topic {topic}: {kafka_reason(exc)}") from None
    finally:
        consumer.close()


def _partitions(consumer: Consumer, topic: str, servers: str, timeout: float) -> list[int]:
    found = consumer.list_topics(topic, timeout).topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise CompactorError(f"topic {topic} does not exist on {servers}")
    return sorted(found.partitions)


def _offset(start: datetime | int | None) -> int:
    if start is None:
        return OFFSET_BEGINNING
    if isinstance(start, datetime):
        return int(start.timestamp() * 1000)  # offsets_for_times reads the time from the offset field
    return start


def _consume(consumer: Consumer, codec: Codec, ends: dict[int, int], starts: dict[int, int]) -> Recorded:
    """Poll until every partition reached its end; loads ordered by broker time, then offset."""
    recorded = Recorded()
    found: list[tuple[int, int, int, Segment]] = []
    done = {p for p, end in ends.items() if _nothing_to_read(starts[p], end)}
    while len(done) < len(ends):
        msg = consumer.poll(POLL_SECONDS)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        partition, offset = msg.partition() or 0, msg.offset() or 0
        if offset >= ends[partition]:  # written after the replay started
            continue
        if offset + 1 >= ends[partition]:
            done.add(partition)
        try:
            event = codec.decode_input(msg.value() or b"")
        except Exception:  # a dead letter's worth: the job refused it too
            recorded.undecodable += 1
            continue
        if _is_load(event):
            assert isinstance(event, SegmentCompleted)
            found.append((msg.timestamp()[1], partition, offset, event.segment))
        else:
            recorded.skipped += 1
    recorded.loads = [segment for *_, segment in sorted(found, key=lambda f: f[:3])]
    return recorded


def _nothing_to_read(start: int, end: int) -> bool:
    """An empty partition, a time after its last message (OFFSET_END), or an offset past it."""
    return end == 0 or start == OFFSET_END or (start >= 0 and start >= end)


def _is_load(event: object) -> bool:
    return (
        isinstance(event, SegmentCompleted)
        and event.action is SegmentAction.CREATE
        and event.segment.origin is Origin.LOAD
    )

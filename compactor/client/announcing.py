"""What both loaders share: plain Kafka settings, one idempotent producer, and the announce step."""

from __future__ import annotations

from typing import Self, Unpack

from compactor.client.connection import Connection, KafkaOptions
from compactor.domain.events import SegmentCompleted
from compactor.kafka.producer import EventProducer


class Announcing:
    """Announces segments on the segments topic; a context manager that closes its producer."""

    def __init__(self, bootstrap_servers: str | None = None, **kafka: Unpack[KafkaOptions]) -> None:
        self.connection = Connection.of(bootstrap_servers, **kafka)
        self._producer = EventProducer(self.connection.kafka)

    def announce(self, event: SegmentCompleted) -> None:
        """Produce one `SegmentCompleted`, keyed by its table, and wait for Kafka's acknowledgement."""
        data = self.connection.codec.encode_segment_completed(event)
        self._producer.send_all([(self.connection.kafka.segments_topic, event.segment.table, data, None)])

    def close(self) -> None:
        """Wait for anything still unsent (every load already waited for its own event)."""
        self._producer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

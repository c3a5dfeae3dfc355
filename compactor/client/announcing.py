"""What both loaders share: plain Kafka settings, one idempotent producer, and the announce step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from compactor.client.connection import Connection, Encoding
from compactor.domain.events import SegmentCompleted
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import DEFAULT_SEGMENTS_TOPIC


class Announcing:
    """Announces segments on the segments topic; a context manager that closes its producer."""

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        *,
        kafka_config: Mapping[str, Any] | None = None,
        segments_topic: str = DEFAULT_SEGMENTS_TOPIC,
        encoding: Encoding = "single_object",
        schema_registry: Mapping[str, str] | None = None,
    ) -> None:
        self.connection = Connection.of(
            bootstrap_servers,
            kafka_config=kafka_config,
            segments_topic=segments_topic,
            encoding=encoding,
            schema_registry=schema_registry,
        )
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

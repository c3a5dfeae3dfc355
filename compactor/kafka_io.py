"""Kafka producer and admin wrappers: idempotent produce, delivery checked, never dropped."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from compactor.config import KafkaSecurity
from compactor.errors import DeliveryError

log = logging.getLogger(__name__)

DEAD_LETTER_REASON_HEADER = "compactor.dead_letter.reason"
DEAD_LETTER_DETAIL_HEADER = "compactor.dead_letter.detail"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is, the topics, and the security settings every client uses.

    The security settings keep secrets as `SecretStr`, so printing or logging
    these settings never shows a password; the dicts below hold them in clear
    and are handed straight to the clients, never logged.
    """

    bootstrap_servers: str
    segments_topic: str = "compactor.segments"
    results_topic: str = "compactor.results"
    dead_letter_topic: str = "compactor.dead-letter"
    security: KafkaSecurity | None = None

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        secure = self.security.librdkafka() if self.security else {}
        return {"bootstrap.servers": self.bootstrap_servers, **secure, **overrides}

    def spark_options(self) -> dict[str, str]:
        """The same settings for Spark's Kafka source (every `kafka.*` option passes through)."""
        options = {"kafka.bootstrap.servers": self.bootstrap_servers}
        if self.security:
            options.update({f"kafka.{k}": v for k, v in self.security.java_client().items()})
        return options


def ensure_topics(
    settings: KafkaSettings, topics: Iterable[str], partitions: int = 1, timeout: float = 30
) -> None:
    """Create the topics that do not exist yet (idempotent)."""
    admin = AdminClient(settings.librdkafka())
    existing = set(admin.list_topics(timeout=timeout).topics)
    missing = [
        NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics if t not in existing
    ]
    if not missing:
        return
    for topic, future in admin.create_topics(missing, operation_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        log.info("created topic %s", topic)


class EventProducer:
    """An idempotent producer that waits for every send to be acknowledged.

    `send_all` returns only when the broker has acknowledged every message, and
    raises `DeliveryError` otherwise, so a failed emit fails the batch (which
    Spark then retries) instead of silently losing an event.
    """

    def __init__(self, settings: KafkaSettings, flush_timeout: float = 60.0) -> None:
        self._producer = Producer(
            settings.librdkafka(
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": int(flush_timeout * 1000),
                }
            )
        )
        self._flush_timeout = flush_timeout

    def send_all(
        self,
        messages: Sequence[tuple[str, str, bytes, Sequence[tuple[str, bytes]] | None]],
    ) -> None:
        """Produce (topic, key, value, headers) messages in order and wait for all acks."""
        failures: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}: {err.str()}")

        for topic, key, value, headers in messages:
            while True:
                try:
                    self._producer.produce(
                        topic,
                        value=value,
                        key=key.encode(),
                        headers=list(headers or ()),
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain, then retry
                    self._producer.poll(0.5)
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise DeliveryError(f"{remaining} message(s) not acknowledged within {self._flush_timeout}s")
        if failures:
            raise DeliveryError("delivery failed: " + "; ".join(failures[:5]))

    def close(self) -> None:
        """Flush, then release the client, so that it does not outlive (and log about) its broker."""
        self._producer.flush(self._flush_timeout)
        close = getattr(self._producer, "close", None)  # older confluent-kafka releases lack close()
        if close is not None:
            close()

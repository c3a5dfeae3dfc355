"""Topics: created when missing."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from compactor.errors import ConfigError, ServiceUnreachable
from compactor.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


def require_broker(settings: KafkaSettings, timeout: float = 10.0) -> None:
    """Fail fast, with one line, when the broker does not answer a metadata request, and at
    once, naming the setting, when it refuses the credentials or the TLS handshake fails
    (librdkafka would retry those for as long as it is asked)."""
    refused: list[KafkaError] = []
    admin = AdminClient(settings.librdkafka(error_cb=refused.append))
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=min(1.0, max(deadline - time.monotonic(), 0.1)))
            return
        except KafkaException as exc:
            failure = exc.args[0]
        admin.poll(0)  # serves the error callback
        wrong = _settings_refused(settings, refused)
        if wrong is not None:
            raise ConfigError(wrong)
        if time.monotonic() >= deadline:
            raise ServiceUnreachable(
                f"Kafka at {settings.bootstrap_servers} did not answer within {timeout:.0f}s ({failure.str()})"
            )


def _settings_refused(settings: KafkaSettings, errors: list[KafkaError]) -> str | None:
    """What the broker's refusal says of the `kafka:` settings (None: no refusal seen)."""
    block = settings.config
    for error in errors:
        if error.code() == KafkaError._AUTHENTICATION:
            user = block.sasl_username if block else None
            return (
                f"Kafka at {settings.bootstrap_servers} refused the credentials of {user!r}: check "
                "kafka.sasl_username, kafka.sasl_password and kafka.sasl_mechanism"
                + (f" ({block.sasl_mechanism})" if block and block.sasl_mechanism else "")
            )
        if error.code() == KafkaError._SSL:
            return (
                f"the TLS handshake with Kafka at {settings.bootstrap_servers} failed: check "
                f"kafka.ssl_ca_location and kafka.security_protocol ({error.str()})"
            )
    return None


def ensure_topics(
    settings: KafkaSettings, topics: Iterable[str], partitions: int | None = None, timeout: float = 30
) -> None:
    """Create the topics that do not exist yet (idempotent): with `partitions` if given, else the
    config's `kafka.topics` settings, else the broker's defaults."""
    require_broker(settings)
    admin = AdminClient(settings.librdkafka())
    existing = set(admin.list_topics(timeout=timeout).topics)
    configured, replicas = settings.new_topics
    missing = [
        NewTopic(t, num_partitions=partitions or configured, replication_factor=replicas)
        for t in topics
        if t not in existing
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


def partition_count(settings: KafkaSettings, topic: str, timeout: float = 30) -> int:
    """The topic's partitions, once the broker's metadata lists them (a topic created a moment
    ago can show none)."""
    admin = AdminClient(settings.librdkafka())
    deadline = time.monotonic() + timeout
    while True:
        found = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return len(found.partitions)
        if time.monotonic() > deadline:
            raise ServiceUnreachable(f"topic {topic}: the broker lists no partitions for it")
        time.sleep(0.2)


def end_offsets(settings: KafkaSettings, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Partition -> its high watermark (the offset the next event will get)."""
    consumer = Consumer(settings.librdkafka(**{"group.id": "compactor-offsets", "enable.auto.commit": False}))
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
    finally:
        consumer.close()

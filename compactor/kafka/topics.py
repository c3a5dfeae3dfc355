"""Topics: created when missing."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from compactor.errors import ServiceUnreachable
from compactor.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


def require_broker(settings: KafkaSettings, timeout: float = 10.0) -> None:
    """Fail fast, with one line, when the broker does not answer a metadata request."""
    try:
        AdminClient(settings.librdkafka()).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ServiceUnreachable(
            f"Kafka at {settings.bootstrap_servers} did not answer within {timeout:.0f}s ({exc.args[0].str()})"
        ) from None


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

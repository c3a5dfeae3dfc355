"""The producer: idempotent, every send acknowledged or the batch fails; nothing is dropped."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from compactor.errors import DeliveryError
from compactor.kafka.failures import kafka_reason
from compactor.kafka.messages import Message
from compactor.kafka.partitioning import JAVA_PARTITIONER
from compactor.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


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
                    # a table's events in one partition whatever client produced them
                    "partitioner": JAVA_PARTITIONER,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": int(flush_timeout * 1000),
                }
            )
        )
        self._flush_timeout = flush_timeout

    def send_all(
        self,
        messages: Sequence[Message],
    ) -> list[tuple[int, int]]:
        """Produce (topic, key, value, headers) messages in order and wait for all acks; where
        each landed, as (partition, offset) in the order given."""
        failures: list[str] = []
        landed = [(-1, -1)] * len(messages)

        def on_delivery(index: int, err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}: {err.str()}")
            else:
                landed[index] = (msg.partition(), msg.offset())

        for index, (topic, key, value, headers) in enumerate(messages):
            while True:
                try:
                    self._producer.produce(
                        topic,
                        value=value,
                        key=key.encode(),
                        headers=list(headers or ()),
                        on_delivery=partial(on_delivery, index),
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain, then retry
                    self._producer.poll(0.5)
                except KafkaException as exc:  # refused at once: the topic is known to refuse us
                    raise DeliveryError(f"delivery failed: {topic}: {kafka_reason(exc)}") from None
        remaining = self._producer.flush(self._flush_timeout)
        if remaining:
            raise DeliveryError(f"{remaining} message(s) not acknowledged within {self._flush_timeout}s")
        if failures:
            raise DeliveryError("delivery failed: " + "; ".join(failures[:5]))
        return landed

    def close(self) -> None:
        """Flush, then release the client, so that it does not outlive (and log about) its broker."""
        self._producer.flush(self._flush_timeout)
        close = getattr(self._producer, "close", None)  # older confluent-kafka releases lack close()
        if close is not None:
            close()

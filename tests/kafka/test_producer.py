"""The producer's refusals name the topic, whichever way librdkafka refuses: at once from
`produce` (the topic already known to refuse this principal) or in the delivery report."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from compactor.errors import DeliveryError
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings


class RefusingAtOnce:
    """librdkafka once its metadata says the topic is not ours to write."""

    def produce(self, topic: str, **_: Any) -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed"))

    def flush(self, timeout: float = 0) -> int:
        return 0


def test_a_topic_refused_at_once_is_named_in_the_error() -> None:
    producer = EventProducer(KafkaSettings("127.0.0.1:9"))
    producer._producer = RefusingAtOnce()  # type: ignore[assignment]
    with pytest.raises(DeliveryError, match=r"delivery failed: secret\.segments: .*authorization failed"):
        producer.send_all([("secret.segments", "t", b"x", None)])

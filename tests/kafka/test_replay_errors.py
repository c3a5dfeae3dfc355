"""A replay that librdkafka refuses says why in one line: the reason, not the error's repr."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from compactor.codec.events import default_codec
from compactor.errors import CompactorError
from compactor.kafka import replay
from compactor.kafka.settings import KafkaSettings


class RefusingConsumer:
    def __init__(self, conf: dict[str, Any]) -> None:
        self.closed = False

    def list_topics(self, topic: str, timeout: float) -> Any:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused by 127.0.0.1:9"))

    def close(self) -> None:
        self.closed = True


def test_a_refused_read_names_the_topic_and_librdkafka_s_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "Consumer", RefusingConsumer)
    with pytest.raises(CompactorError) as refused:
        replay.read_loads(KafkaSettings(bootstrap_servers="127.0.0.1:9"), "loads", default_codec())
    assert str(refused.value) == "cannot read topic loads: Connection refused by 127.0.0.1:9"

"""A real Kafka broker in its own JVM: round trip, clean stop, crash and restart."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer

from compactor.dev.kafka_broker import LocalKafkaBroker, running_bootstrap, stop_from_dir

pytestmark = pytest.mark.integration

VALUES = [b"first", b"second", b"third"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalKafkaBroker]:
    b = LocalKafkaBroker(tmp_path / "kafka")
    try:
        yield b
    finally:
        b.stop()


def _fresh_topic() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def _produce(bootstrap: str, topic: str, values: list[bytes], producer: Producer | None = None) -> None:
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    # idempotent: a send retried while the topic is auto-created keeps its place in the partition
    producer = producer or Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for value in values:
        producer.produce(topic, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "messages still queued after 30 s"
    assert errors == []


def _consume(bootstrap: str, topic: str, count: int, timeout: float = 60) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"group-{uuid.uuid4().hex[:12]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert isinstance(value, bytes)
            values.append(value)
    finally:
        consumer.close()
    return values


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_produce_and_consume_round_trip(broker: LocalKafkaBroker) -> None:
    bootstrap = broker.start()
    assert bootstrap == f"127.0.0.1:{broker.port}"
    topic = _fresh_topic()

    _produce(bootstrap, topic, VALUES)

    assert _consume(bootstrap, topic, len(VALUES)) == VALUES


def test_stop_closes_the_port_and_is_idempotent(broker: LocalKafkaBroker) -> None:
    broker.start()
    assert _answers(broker.port)
    assert (broker.data_dir / "broker.json").exists()

    broker.stop()

    assert not broker.is_running
    assert not _answers(broker.port)
    assert not (broker.data_dir / "broker.json").exists()
    broker.stop()  # second stop is a no-op


def test_helpers_find_and_stop_a_broker_by_dir(broker: LocalKafkaBroker) -> None:
    bootstrap = broker.start()

    assert running_bootstrap(broker.data_dir) == bootstrap
    assert stop_from_dir(broker.data_dir) is True

    assert not _answers(broker.port)
    assert running_bootstrap(broker.data_dir) is None
    assert stop_from_dir(broker.data_dir) is False


def test_kill_and_restart_keep_messages_and_bootstrap(broker: LocalKafkaBroker) -> None:
    bootstrap = broker.start()
    topic = _fresh_topic()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    _produce(bootstrap, topic, VALUES, producer)

    broker.kill()
    assert not _answers(broker.port)

    assert broker.restart() == bootstrap
    # A client made before the crash reconnects on its own to the same address.
    _produce(bootstrap, topic, [b"after-restart"], producer)
    assert _consume(bootstrap, topic, len(VALUES) + 1) == [*VALUES, b"after-restart"]


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    broker = LocalKafkaBroker(tmp_path / "kafka")
    with broker as bootstrap:
        assert running_bootstrap(broker.data_dir) == bootstrap
    assert not broker.is_running
    assert not _answers(broker.port)

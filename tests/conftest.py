"""Shared fixtures: the real Kafka broker, a Spark session with Delta, fresh topics."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

log = logging.getLogger(__name__)


def _docker_kafka() -> Iterator[str] | None:
    """A testcontainers Kafka when a Docker engine answers, else None."""
    try:  # testcontainers >= 4.15 moved the module; older releases keep the old path
        from testcontainers.community.kafka import KafkaContainer  # type: ignore[import-not-found]
    except ImportError:
        try:
            from testcontainers.kafka import KafkaContainer  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return None
    try:
        container = KafkaContainer().with_kraft()
        container.start()
    except Exception as exc:  # docker.errors.DockerException when no engine answers
        log.info("no Docker engine (%s); using the local broker", type(exc).__name__)
        return None

    def run() -> Iterator[str]:
        try:
            yield container.get_bootstrap_server()
        finally:
            container.stop()

    return run()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """KAFKA_BOOTSTRAP_SERVERS if set; else testcontainers; else a local KRaft broker."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    docker = _docker_kafka()
    if docker is not None:
        yield from docker
        return
    from compactor.kafka_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(tmp_path_factory.mktemp("kafka"))
    bootstrap = broker.start()
    try:
        yield bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from compactor.spark_session import build_spark

    session = build_spark("compactor-tests", master="local[2]")
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Names unique to this test (topics, groups), so tests never see each other's events."""
    suffix = uuid.uuid4().hex[:8]
    return lambda prefix: f"{prefix}-{suffix}"


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse"
    path.mkdir()
    return path

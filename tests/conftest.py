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
    from compactor.dev.kafka_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(tmp_path_factory.mktemp("kafka"))
    bootstrap = broker.start()
    try:
        yield bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from compactor.delta.session import build_spark

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


@pytest.fixture(autouse=True)
def _delta_rs_reads_what_spark_reads(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every table an integration test leaves behind must read the same in delta-rs as in Spark."""
    if "warehouse" not in request.fixturenames or request.node.get_closest_marker("integration") is None:
        yield
        return
    # asked for before the test runs, so that both are torn down after this check
    warehouse: Path = request.getfixturevalue("warehouse")
    spark = request.getfixturevalue("spark")
    yield
    if getattr(request.node, "rep_call_failed", True):
        return
    from tests.helpers.streaming import assert_delta_rs_agrees

    for table in sorted(p for p in warehouse.iterdir() if (p / "_delta_log").is_dir()):
        assert_delta_rs_agrees(spark, table)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.rep_call_failed = report.failed  # type: ignore[attr-defined]
    return report

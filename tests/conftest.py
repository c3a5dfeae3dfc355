"""Shared fixtures: the real Kafka broker, a Spark session with Delta, fresh topics."""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from compactor.dev import SHORT_RUN_JVM_OPTIONS

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
    if os.environ.get("PYTEST_XDIST_WORKER"):
        yield _shared_broker(tmp_path_factory.getbasetemp().parent)
        return
    from compactor.dev.kafka_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(tmp_path_factory.mktemp("kafka"))
    bootstrap = broker.start()
    try:
        yield bootstrap
    finally:
        broker.stop()


SHARED_BROKER = "shared-kafka"


def _shared_broker(run_dir: Path) -> str:
    """The test workers' one broker: the first worker to ask starts it, the others find it, and the
    controller stops it when the run ends (pytest_sessionfinish). A broker per worker cost each
    worker a JVM start and its idle CPU for the whole run; tests never share a topic or a group."""
    from filelock import FileLock

    from compactor.dev.broker_process import running_bootstrap
    from compactor.dev.kafka_broker import LocalKafkaBroker

    with FileLock(run_dir / f"{SHARED_BROKER}.lock"):
        return running_bootstrap(run_dir / SHARED_BROKER) or LocalKafkaBroker(run_dir / SHARED_BROKER).start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller of a run with workers stops the broker they shared (none: nothing to do)."""
    if hasattr(session.config, "workerinput"):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        from compactor.dev.broker_process import stop_from_dir

        stop_from_dir(factory.getbasetemp() / SHARED_BROKER)


# the suite's JVMs live minutes: JIT settings for that (a SPARK_SUBMIT_OPTS of your own wins)
os.environ.setdefault("SPARK_SUBMIT_OPTS", SHORT_RUN_JVM_OPTIONS)

# A property test's failure prints the blob that replays it (`@reproduce_failure`): CI starts
# without Hypothesis's example database, so a rare draw it fails on is otherwise seen only once.
settings.register_profile("compactor", print_blob=True)
settings.load_profile("compactor")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from compactor.spark.session import build_spark

    # Python UDFs (a test's hung merge) run in this interpreter, with its packages, not whatever
    # `python3` is first on the PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    # with the S3A and GCS connectors, so that tests on an object store's server use the same session
    session = build_spark("compactor-tests", master="local[2]", locations=("s3a://tests", "gs://tests"))
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@dataclass(frozen=True)
class S3Server:
    """A real S3 API (moto's server) on 127.0.0.1, with one bucket, and how clients reach it."""

    endpoint: str
    bucket: str

    def spark_conf(self) -> dict[str, str]:
        """What a user sets for an S3-compatible store: its endpoint and path-style access."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        }

    def location(self, name: str) -> str:
        return f"s3a://{self.bucket}/{name}"


@pytest.fixture(scope="session")
def s3(spark: Any) -> Iterator[S3Server]:
    """moto's S3 server, started here and stopped at the end; credentials from the environment,
    as S3A's default chain reads them (any value is accepted)."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "compactor-test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "compactor-test")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    found = S3Server(f"http://{host}:{port}", "compactor-test")
    boto3.client("s3", endpoint_url=found.endpoint, region_name="us-east-1").create_bucket(
        Bucket=found.bucket
    )
    hadoop = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    for key, value in found.spark_conf().items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    # this session's JVM started before the variables were set: give it the keys directly
    hadoop.set("fs.s3a.access.key", os.environ["AWS_ACCESS_KEY_ID"])
    hadoop.set("fs.s3a.secret.key", os.environ["AWS_SECRET_ACCESS_KEY"])
    try:
        yield found
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """fake-gcs-server, started here and stopped at the end, with Google's connector pointed at it."""
    from tests.helpers.gcs import GcsServer

    server = GcsServer(tmp_path_factory.mktemp("gcs")).start()
    hadoop = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    for key, value in server.spark_conf().items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    try:
        yield server
    finally:
        server.stop()


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
        assert_delta_rs_agrees(spark, table, readable_only=True)


# fixtures that start a real Spark session, Kafka broker, object store or network proxy
REAL_COMPONENTS = frozenset({"spark", "kafka_bootstrap", "s3", "gcs", "toxiproxy", "proxied_kafka"})


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a real component is an integration test even if its module forgot to
    say so: `make unit` and `make check` (-m "not integration") leave it out.

    The slowest folders run first: xdist hands tests out in this order, and a fault test of two
    minutes left for the end ran alone while the other workers sat idle (about 8 of the suite's
    45 minutes here)."""
    for item in items:
        if REAL_COMPONENTS & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    items.sort(key=lambda item: not item.nodeid.startswith(SLOWEST_FOLDERS))  # stable: order kept within


SLOWEST_FOLDERS = ("tests/faults/", "tests/e2e/")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.rep_call_failed = report.failed  # type: ignore[attr-defined]
    return report

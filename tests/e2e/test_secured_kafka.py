"""The job on a Kafka that requires SASL_SSL (SCRAM-SHA-512 over TLS) and grants by ACL only: the
job (Spark's Kafka source, its producers, the lease, the console's tail), a loader and a results
consumer each with a principal of its own and what it needs and no more; a principal that may
not write the segments topic cannot steer the job; a wrong password fails in seconds with one
line; no password reaches a log line, a status page or `config show`. SASL/PLAIN and mutual TLS
sign in as the deploying guide writes them.

The broker is the project's local KRaft broker in its secured mode (`BrokerSecurity`), started
once for the module; every test uses topics of its own."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer

from compactor.client.results import ResultsFollower
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.dev.broker_security import MECHANISM, MUTUAL_TLS, PLAIN, BrokerSecurity, Grant, grant
from compactor.dev.kafka_broker import LocalKafkaBroker
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.kafka.codecs import codec_for
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from compactor.observe.console.topic_tail import TopicTail
from compactor.observe.metrics.readiness import Readiness
from tests.helpers.jobs import COMPACTOR, TABLE, bulk_load

pytestmark = pytest.mark.integration

# passwords no output may show; each is long and unusual enough that a match is no accident
PASSWORDS = {
    "admin": "adm1n-Secret-7f3a",
    "compactor": "j0b-Secret-91c2",
    "loader": "l0ader-Secret-44be",
    "reader": "r3ader-Secret-0d17",
    "intruder": "intrud3r-Secret-5aa9",
}
JOB_PASSWORD_ENV = "COMPACTOR_TEST_KAFKA_PASSWORD"
RULES = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker]:
    broker = LocalKafkaBroker(tmp_path_factory.mktemp("secured-kafka"), security=BrokerSecurity(PASSWORDS))
    broker.start(timeout=120)
    try:
        yield broker
    finally:
        broker.stop()


def settings(
    broker: LocalKafkaBroker, user: str, prefix: str, password: str | None = None, way_in: str = MECHANISM
) -> KafkaSettings:
    """`user`'s Kafka settings for the topics of one test (`prefix`), signing in `way_in`."""
    block = broker.kafka_block(user, way_in)
    if password is not None:
        block["sasl_password"] = password
    config = load_config({**RULES, "kafka": {**block, "topics": {"advice": f"{prefix}.advice"}}})
    return KafkaSettings(
        broker.bootstrap_for(way_in),
        f"{prefix}.segments",
        f"{prefix}.results",
        f"{prefix}.dead",
        config.kafka,
    )


def job_grants(prefix: str) -> list[Grant]:
    """What the job needs: its topics (the lease's `<segments>.controller` and the advice topic
    it creates), its consumer groups (the lease's, the results read-back's, Spark's source)."""
    return [
        Grant("compactor", "topic", prefix, ("READ", "WRITE", "DESCRIBE", "CREATE"), prefixed=True),
        Grant("compactor", "group", "compactor-", ("READ", "DESCRIBE"), prefixed=True),
        Grant("compactor", "group", "spark-kafka-source-", ("READ", "DESCRIBE"), prefixed=True),
    ]


@pytest.fixture
def topics(secured: LocalKafkaBroker, unique: Callable[[str], str]) -> str:
    """A prefix of this test's topics, created by `admin`, with each principal's ACLs."""
    prefix = unique("sec")
    admin = settings(secured, "admin", prefix)
    ensure_topics(admin, [*admin.topics[:3]])
    grant(
        secured.client_settings(),
        [
            *job_grants(prefix),
            Grant("loader", "topic", f"{prefix}.segments", ("WRITE", "DESCRIBE")),
            Grant("reader", "topic", f"{prefix}.results", ("READ", "DESCRIBE")),
            Grant("reader", "group", "reader-", ("READ",), prefixed=True),
            Grant("intruder", "topic", f"{prefix}.results", ("READ", "DESCRIBE")),
        ],
    )
    return prefix


def job_config(tmp_path: Path, secured: LocalKafkaBroker, prefix: str) -> Path:
    """The job's config file: its password read from the environment, never written down."""
    block = secured.kafka_block("compactor")
    block["sasl_password"] = f"env:{JOB_PASSWORD_ENV}"
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({**RULES, "kafka": {**block, "topics": {"advice": f"{prefix}.advice"}}}))
    return path


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMPACTOR, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def assert_no_secret(text: str, where: str) -> None:
    shown = [user for user, password in PASSWORDS.items() if password in text]
    assert not shown, f"{where} shows the password of {shown}"


def test_a_week_merges_end_to_end_with_a_principal_for_each_party(
    spark: Any, secured: LocalKafkaBroker, topics: str, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    bulk_load(spark, warehouse, settings(secured, "loader", topics), days=7, rows=10)
    config = job_config(tmp_path, secured, topics)
    job = settings(secured, "compactor", topics)
    os.environ[JOB_PASSWORD_ENV] = PASSWORDS["compactor"]
    try:
        done = cli(  # at INFO (-v): every line the job logs is searched for a secret
            "-v", "run", "--config", str(config), "--warehouse", str(warehouse),
            "--checkpoint", str(tmp_path / "cp"), "--bootstrap-servers", secured.bootstrap,
            "--segments-topic", job.segments_topic, "--results-topic", job.results_topic,
            "--dead-letter-topic", job.dead_letter_topic, "--until-idle",
            timeout=600,
        )  # fmt: skip
        status = cli(
            "status", "--config", str(config), "--warehouse", str(warehouse),
            "--bootstrap-servers", secured.bootstrap, "--segments-topic", job.segments_topic,
        )  # fmt: skip
        shown = cli("config", "show", str(config))
    finally:
        del os.environ[JOB_PASSWORD_ENV]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert spark.read.format("delta").load(str(warehouse / TABLE)).count() == 70
    # the driver read each micro-batch itself, signed in and granted as the job's Spark source is
    assert "read through Spark" not in done.stdout + done.stderr
    assert re.search(r"batch \d+: [1-9]\d* event", done.stdout + done.stderr)

    reader = settings(secured, "reader", topics)
    with ResultsFollower(
        "reader-e2e", kafka_config=secured.client_settings("reader"), results_topic=reader.results_topic
    ) as results:
        # the job is done: every result is on the topic, and joining the group takes well under
        # a second (the local broker's group.initial.rebalance.delay.ms is 0)
        (result,) = list(results.follow(idle_timeout=5))
    assert (result["table"], str(result["status"]), result["records_out"]) == (TABLE, "SUCCEEDED", 70)
    assert sorted(result["inputs"]) == [f"d{d:02d}" for d in range(7)]

    tail = TopicTail(job, codec_for(job)).start()  # the console's, as the job's principal
    try:
        deadline = time.monotonic() + 60
        while not tail.merges(TABLE) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert tail.problem is None and [m.table for m in tail.merges()] == [TABLE]
    finally:
        tail.stop()

    assert status.returncode == 0 and TABLE in status.stdout, status.stderr
    assert shown.returncode == 0 and "sasl_password" in shown.stdout, shown.stderr
    for text, where in (
        (done.stdout + done.stderr, "the job's log"),
        (status.stdout + status.stderr, "compactor status"),
        (shown.stdout + shown.stderr, "compactor config show"),
    ):
        assert_no_secret(text, where)


def refused_disable(
    secured: LocalKafkaBroker, segments: str, kafka: dict[str, Any], config: Path, way_in: str = MECHANISM
) -> str:
    """`compactor table disable` with `kafka` as its `kafka:` block: it must fail within seconds
    with one line and no traceback; that line."""
    config.write_text(yaml.safe_dump({**RULES, "kafka": kafka}))
    began = time.monotonic()
    failed = cli(
        "table", "disable", TABLE, "--config", str(config),
        "--bootstrap-servers", secured.bootstrap_for(way_in), "--segments-topic", segments,
    )  # fmt: skip
    assert time.monotonic() - began < 30 and failed.returncode != 0
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert_no_secret(failed.stdout + failed.stderr, "the refusal")
    return lines[0]


def test_a_principal_that_may_not_write_the_segments_topic_cannot_steer_the_job(
    secured: LocalKafkaBroker, topics: str, tmp_path: Path
) -> None:
    segments = f"{topics}.segments"
    block = secured.kafka_block("intruder")
    line = refused_disable(secured, segments, block, tmp_path / "intruder.yaml")
    assert "authorization failed" in line.lower() and segments in line, line


def test_wrong_credentials_or_trust_fail_in_seconds_with_one_line_naming_the_setting(
    secured: LocalKafkaBroker, topics: str, tmp_path: Path
) -> None:
    wrong = "not-the-Password-0000"
    segments = f"{topics}.segments"
    block = secured.kafka_block("loader")
    line = refused_disable(secured, segments, {**block, "sasl_password": wrong}, tmp_path / "wrong.yaml")
    assert "kafka.sasl_password" in line and "'loader'" in line and wrong not in line, line

    # the broker's CA not given: the system's CAs do not trust it
    line = refused_disable(
        secured, segments, {**block, "ssl_ca_location": None}, tmp_path / "untrusting.yaml"
    )
    assert "kafka.ssl_ca_location" in line, line

    # a running job whose password was rotated on the broker: /ready says why, it does not fail
    problem = Readiness(settings(secured, "loader", topics, password=wrong)).broker()
    assert problem is not None and "kafka.sasl_password" in problem and wrong not in problem


def test_plain_and_mutual_tls_sign_in_as_the_deploying_guide_writes_them(
    spark: Any, secured: LocalKafkaBroker, topics: str, tmp_path: Path
) -> None:
    """The guide's two other ways in, on the same broker and ACLs: a loader publishes over
    SASL/PLAIN; the job's principal reads the segments topic over mutual TLS, with librdkafka and
    with Spark's Kafka source (its certificate's common name is its principal); a certificate
    whose principal may not write the segments topic cannot steer the job."""
    loader = settings(secured, "loader", topics, way_in=PLAIN)
    start = now_utc().replace(microsecond=0)
    segment = Segment("d00", TABLE, TimeRange(start, start + timedelta(days=1)), loaded_at=start, records=1)
    payload = default_codec().encode_segment_completed(SegmentCompleted(segment, start))
    producer = EventProducer(loader)
    try:
        producer.send_all([(loader.segments_topic, TABLE, payload, None)])
    finally:
        producer.close()

    job = settings(secured, "compactor", topics, way_in=MUTUAL_TLS)
    read = (
        spark.read.format("kafka")
        .options(**job.spark_options())
        .option("subscribe", job.segments_topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    assert [bytes(r.value) for r in read.collect()] == [payload], "Spark's source, by certificate"
    consumer = Consumer(
        job.librdkafka(**{"group.id": f"compactor-{topics}", "auto.offset.reset": "earliest"})
    )
    try:
        consumer.subscribe([job.segments_topic])
        deadline, got = time.monotonic() + 60, None
        while got is None and time.monotonic() < deadline:
            got = consumer.poll(1.0)
        assert got is not None and got.error() is None and got.value() == payload, "librdkafka"
    finally:
        consumer.close()

    block = secured.kafka_block("intruder", MUTUAL_TLS)
    line = refused_disable(secured, job.segments_topic, block, tmp_path / "intruder.yaml", MUTUAL_TLS)
    assert "authorization failed" in line.lower() and job.segments_topic in line, line

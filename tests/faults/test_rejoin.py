"""The real job (`compactor run`, its own process) cut off from its broker for longer than its
session, twice, then reconnected; and its broker killed and restarted on the same port and data.
The process never exits: its shard stops when the session is lost, comes back when the group
gives it back, every plan commits once and is announced once, the rows are exact, and status and
the metrics tell the outage and the rejoin."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from compactor.cli.main import main
from compactor.codec.events import default_codec
from compactor.delta.paths import table_uri
from compactor.dev.broker_process import free_ports
from compactor.dev.kafka_broker import LocalKafkaBroker
from compactor.kafka.lease import SESSION_TIMEOUT_MS
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from tests.helpers.jobs import TABLE, bulk_load, start_job, stop, wait_while_running
from tests.helpers.streaming import checksum, consume_all
from tests.helpers.toxiproxy import ProxiedBroker, Proxy

pytestmark = pytest.mark.integration

CONFIG_YAML = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week]\n"
OUTAGE_S = SESSION_TIMEOUT_MS / 1000 + 12  # past the session, and past the watchdog's look


def lease_samples(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("compactor_lease_")
    }


def merged_weeks(spark: Any, warehouse: Path) -> int:
    if not (warehouse / TABLE / "_delta_log").exists():
        return 0
    rows = (
        spark.read.format("delta").load(table_uri(warehouse, TABLE)).select("segment_id").distinct().collect()
    )
    return sum(1 for r in rows if r.segment_id.startswith("m-"))


def assert_each_week_once(spark: Any, warehouse: Path, direct: KafkaSettings, weeks: int, rows: int) -> None:
    table = spark.read.format("delta").load(table_uri(warehouse, TABLE))
    ids = sorted(r.segment_id for r in table.select("segment_id").distinct().collect())
    assert len(ids) == weeks and all(i.startswith("m-") for i in ids), ids
    assert checksum(table)[0] == weeks * 7 * rows, "no row lost or doubled"
    codec = default_codec()
    results = [
        codec.decode_merge_result(m.value())
        for m in consume_all(direct.bootstrap_servers, direct.results_topic)
    ]
    assert sorted(r["output"]["segment_id"] for r in results) == ids, "each plan announced once"
    merges = [r for r in spark.sql(f"DESCRIBE HISTORY delta.`{table_uri(warehouse, TABLE)}`").collect()
              if r.userMetadata and '"op":"merge"' in r.userMetadata]  # fmt: skip
    assert len(merges) == weeks, "each plan committed once"


def status_text(warehouse: Path, config: Path, bootstrap: str, kafka: KafkaSettings) -> str:
    result = CliRunner().invoke(
        main,
        ["status", "--config", str(config), "--warehouse", str(warehouse),
         "--bootstrap-servers", bootstrap, "--segments-topic", kafka.segments_topic],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output


def test_a_job_cut_off_past_its_session_twice_rejoins_and_never_exits(
    spark: Any, proxied_kafka: tuple[ProxiedBroker, Proxy], unique: Callable[[str], str], tmp_path: Path
) -> None:
    broker, proxy = proxied_kafka
    direct = KafkaSettings(broker.bootstrap, unique("segments"), unique("results"), unique("dead"))
    ensure_topics(direct, list(direct.topics))
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "cp"
    (port,) = free_ports(1, set())
    job = start_job(config, warehouse, checkpoint, broker.proxied_bootstrap, direct, port)
    try:
        for week in range(3):
            bulk_load(spark, warehouse, direct, days=7, rows=5, first_day=7 * week)
            wait_while_running(
                lambda w=week: merged_weeks(spark, warehouse) == w + 1, job, job.log, f"week {week}"
            )
            if week < 2:
                with proxy.cut():  # longer than the session: the broker gives the shard away
                    time.sleep(OUTAGE_S)
                    assert job.poll() is None, "the job runs on through the outage"
                wait_while_running(
                    lambda w=week: lease_samples(port).get("compactor_lease_rejoined_total") == w + 1,
                    job, job.log, f"rejoin {week + 1}",
                )  # fmt: skip
        samples = lease_samples(port)
        assert samples["compactor_lease_lost_total"] == 2 and samples["compactor_lease_rejoined_total"] == 2
        assert samples["compactor_lease_shards_held"] == 1 and samples["compactor_lease_lost"] == 0
        assert samples["compactor_lease_last_outage_seconds"] >= SESSION_TIMEOUT_MS / 1000
        said = status_text(warehouse, config, broker.bootstrap, direct)
        assert "2 lost session(s) recorded; rejoined at" in said, said
        assert_each_week_once(spark, warehouse, direct, weeks=3, rows=5)
        assert job.poll() is None
    finally:
        output = stop(job)
    assert job.returncode == 0, output[-3000:]
    assert "rejoined" in output and "lost shard(s) [0]" in output, output[-3000:]


def test_a_broker_killed_and_restarted_on_its_port_and_data_finds_the_job_still_running(
    spark: Any, unique: Callable[[str], str], tmp_path: Path
) -> None:
    broker = LocalKafkaBroker(tmp_path / "kafka")  # our own broker: the shared one must stay up
    bootstrap = broker.start()
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "cp"
    kafka = KafkaSettings(bootstrap, unique("segments"), unique("results"), unique("dead"))
    (port,) = free_ports(1, set())
    job = None
    try:
        ensure_topics(kafka, list(kafka.topics))
        job = start_job(config, warehouse, checkpoint, bootstrap, kafka, port)
        bulk_load(spark, warehouse, kafka, days=7, rows=5)
        wait_while_running(lambda: merged_weeks(spark, warehouse) == 1, job, job.log, "the first week")
        broker.kill()  # SIGKILL: no clean shutdown
        time.sleep(OUTAGE_S)
        assert job.poll() is None, "the job waits for its broker"
        assert broker.restart() == bootstrap
        bulk_load(spark, warehouse, kafka, days=7, rows=5, first_day=7)
        wait_while_running(
            lambda: merged_weeks(spark, warehouse) == 2, job, job.log, "the second week", timeout=240
        )
        assert_each_week_once(spark, warehouse, kafka, weeks=2, rows=5)
        assert job.poll() is None
    finally:
        output = stop(job) if job is not None else ""
        broker.stop()
    assert job is not None and job.returncode == 0, output[-3000:]

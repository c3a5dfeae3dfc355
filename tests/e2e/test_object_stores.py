"""The whole line on object-store warehouses: moto's S3 API server and fake-gcs-server on 127.0.0.1,
reached through Hadoop's S3A connector and Google's GCS connector configured as users configure
them (the config file's `spark:` block; S3 credentials from the environment). Loads, a week
cascade, a hard kill and a restart of the real job process, then the rows and checksum, and the
durable catalog read back from the store. (abfss:// is untested: no ADLS Gen2 emulator can be had
from the registries this project builds from.)"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from compactor.cli.dry_run import run_plan
from compactor.client.loader import load_segment, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
from compactor.kafka.producer import EventProducer
from tests.helpers.jobs import bulk_load, run_job
from tests.helpers.sales import TABLE, handler_for, load_days, merge_versions
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)
WEEKS = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}


# GCS's crash and restart is the nightly run's (CI's time): the merges on GCS stay in CI below
@pytest.mark.parametrize("store_name", ["s3", pytest.param("gcs", marks=pytest.mark.nightly)])
def test_loads_a_week_cascade_a_crash_and_a_restart_on_an_object_store(
    spark: Any, store_name: str, request: pytest.FixtureRequest, kafka_bootstrap: str,
    unique: Callable[[str], str], tmp_path: Path,
) -> None:  # fmt: skip
    store = request.getfixturevalue(store_name)  # S3Server or GcsServer: location() and spark_conf()
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse, checkpoint = store.location(unique("warehouse")), store.location(unique("checkpoint"))
    # two weeks in one append (a load per day on an object store: the loader test below)
    loaded = bulk_load(spark, warehouse, kafka, days=14, rows=5, table=TABLE)
    table = lambda: spark.read.format("delta").load(table_uri(warehouse, TABLE))  # noqa: E731
    before = checksum(table())
    config = tmp_path / "tables.yaml"
    config.write_text(yaml.safe_dump(WEEKS | {"spark": store.spark_conf()}))
    args = [
        "--config", str(config), "--warehouse", warehouse, "--checkpoint", checkpoint,
        "--bootstrap-servers", kafka_bootstrap, "--segments-topic", kafka.segments_topic,
        "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
    ]  # fmt: skip

    crashed = run_job(args, fault="after_commit")
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    recovered = run_job(args, fault=None)
    assert recovered.returncode == 0, recovered.stderr[-3000:]

    expected = run_plan(load_config(WEEKS), loaded, simulate=True)
    assert checksum(table()) == before
    ids = {r.segment_id for r in table().select("segment_id").distinct().collect()}
    assert ids == {s["id"] for s in expected["segments"]} and len(ids) == 2, "two weeks, each merged once"
    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert {r["plan_id"] for r in results} == {m["plan_id"] for m in expected["merges"]}
    assert {r["status"].value for r in results} == {"SUCCEEDED"}
    assert len(merge_versions(spark, warehouse)) == len(expected["merges"]), "no merge executed twice"
    assert consume_all(kafka_bootstrap, kafka.dead_letter_topic) == []
    stored = DeltaCatalogStore(spark, warehouse).load()
    assert {s.id for s in stored.segments[TABLE]} == ids, "the catalog lives in the store's warehouse too"


@pytest.mark.parametrize("store_name", ["s3", "gcs"])
def test_a_loader_in_the_same_driver_appends_while_the_job_merges_on_an_object_store(
    spark: Any, store_name: str, request: pytest.FixtureRequest, kafka_bootstrap: str,
    unique: Callable[[str], str], tmp_path: Path,
) -> None:  # fmt: skip
    """Delta's S3 and GCS log stores serialise commits within one Spark driver (see
    docs/deploying.md for several writing processes): a loader thread and the job share this one."""
    store = request.getfixturevalue(store_name)
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = store.location(unique("warehouse"))
    load_days(spark, warehouse, kafka, JAN, 7, rows=5)
    handler = handler_for(spark, warehouse, kafka, ["week"])
    producer = EventProducer(kafka)

    def loader() -> None:
        for d in range(7):
            start = JAN + timedelta(days=7 + d)
            rows = sample_rows(spark, start, start + timedelta(days=1), 5, seed=d)
            load_segment(spark, warehouse, kafka, producer, TABLE, rows, start, start + timedelta(days=1))

    thread = threading.Thread(target=loader)
    thread.start()
    JobRunner(spark, handler, kafka, Path(tmp_path / "cp")).run_until_quiet()
    thread.join()
    JobRunner(spark, handler, kafka, Path(tmp_path / "cp")).run_until_quiet()
    segments = handler.catalog.segments(TABLE)
    assert [(s.start, s.end) for s in sorted(segments, key=lambda s: s.start)] == [
        (JAN, JAN + timedelta(days=7)),
        (JAN + timedelta(days=7), JAN + timedelta(days=14)),
    ]
    assert checksum(spark.read.format("delta").load(table_uri(warehouse, TABLE)))[0] == 14 * 5

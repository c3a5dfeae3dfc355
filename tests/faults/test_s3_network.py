"""An object store whose connections die in the middle of an upload (Toxiproxy in front of moto's
S3 server): the merge fails without a trace in the table, and succeeds once the network heals."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from delta.tables import DeltaTable

from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.job.wiring import build_handler
from tests.conftest import S3Server
from tests.helpers.sales import TABLE, load_days
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka
from tests.helpers.toxiproxy import Toxiproxy

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)
CONFIG = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}})


def faulty_bucket(spark: Any, s3: S3Server, toxiproxy: Toxiproxy, name: str) -> Any:
    """A bucket reached through the proxy (S3A's per-bucket endpoint), with few retries, so that a
    cut connection shows as a failure in seconds rather than after S3A's minutes of retrying."""
    boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    proxy = toxiproxy.proxy(name, s3.endpoint.removeprefix("http://"))
    hadoop = spark._jsc.hadoopConfiguration()
    for key, value in {
        "endpoint": f"http://127.0.0.1:{proxy.listen}", "retry.limit": "1", "retry.interval": "50ms",
        "attempts.maximum": "1", "retry.throttle.limit": "1",
    }.items():  # fmt: skip
        hadoop.set(f"fs.s3a.bucket.{name}.{key}", value)
    return proxy


def test_an_upload_cut_in_the_middle_fails_the_merge_cleanly_and_the_next_attempt_commits(
    spark: Any, s3: S3Server, toxiproxy: Toxiproxy, kafka_bootstrap: str, unique: Callable[[str], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    bucket = unique("faulty")
    proxy = faulty_bucket(spark, s3, toxiproxy, bucket)
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = f"s3a://{bucket}/warehouse"
    loaded = load_days(spark, warehouse, kafka, JAN, 7, rows=3000)  # type: ignore[arg-type]
    table = lambda: spark.read.format("delta").load(table_uri(warehouse, TABLE))  # noqa: E731
    before, version = checksum(table()), DeltaTable.forPath(spark, table_uri(warehouse, TABLE)).history(1)
    now = [datetime.now(UTC)]  # the job's clock: the failed plan's cool-down ends when the test says
    handler = build_handler(spark, CONFIG, warehouse, kafka, codec=default_codec(), clock=lambda: now[0])
    runner = JobRunner(spark, handler, kafka, tmp_path / "cp")
    # every connection is closed once it has sent half a day's file: requests pass, an upload of
    # the merged week cannot, however often it is tried
    with proxy.toxic("limit_data", stream="upstream", bytes=max(s.bytes for s in loaded) // 2):
        runner.run_once()
    assert handler.stats.failed_merges >= 1 and handler.stats.merges == 0
    assert sorted(s.id for s in handler.catalog.segments(TABLE)) == sorted(s.id for s in loaded)
    history = DeltaTable.forPath(spark, table_uri(warehouse, TABLE)).history(1)
    assert history.collect()[0].version == version.collect()[0].version, "no partial commit"
    assert checksum(table()) == before, "no row lost or doubled"

    now[0] += timedelta(minutes=10)  # the network healed and the cool-down is over
    runner.run_until_quiet()  # the plan is tried again
    (week,) = handler.catalog.segments(TABLE)
    assert week.records == 7 * 3000 and checksum(table()) == before
    ids = {r.segment_id for r in table().select("segment_id").distinct().collect()}
    assert ids == {week.id}, "the table holds the merged week only"
    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert [r["status"] for r in results][-1] == "SUCCEEDED" and results[-1]["output"][
        "segment_id"
    ] == week.id
    assert all(r["status"] != "SUCCEEDED" for r in results[:-1]), "one success, after the failed tries"
    handler.close()

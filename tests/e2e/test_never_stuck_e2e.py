"""Never stuck, on real Kafka, Spark and Delta: a merge made to hang (a Python UDF that sleeps in
its Spark job) is cancelled past its time bound and the table merges afterwards; a table whose
data makes every merge fail ends quarantined with its last error while another table merges."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from compactor.client.loader import load_segment, sample_rows
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.rewrite import merge as merge_module
from compactor.domain.events import MergeStatus
from compactor.job.query import start_query
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.stream.runner import quarantine_error
from tests.e2e.test_capacity_e2e import results
from tests.helpers.streaming import checksum, make_kafka

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday


def wait(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f}s"
        time.sleep(0.5)


def load_week(spark: Any, warehouse: Path, kafka: Any, table: str, rows: int = 5) -> None:
    producer = EventProducer(kafka)
    for day in range(7):
        start = JAN + timedelta(days=day)
        load_segment(
            spark, warehouse, kafka, producer, table, sample_rows(spark, start, start + timedelta(days=1), rows, seed=day),
            start, start + timedelta(days=1), segment_id=f"{table}-{day}",
        )  # fmt: skip
    producer.close()


def test_a_hung_merge_is_cancelled_and_the_table_merges_afterwards(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    load_week(spark, warehouse, kafka, "t")
    before = checksum(spark.read.format("delta").load(table_uri(warehouse, "t")))
    hung = {"once": True}
    layout = merge_module._layout

    def hanging(source: DataFrame, *args: Any) -> Any:
        if hung.pop("once", False):  # the first merge's Spark job sleeps in a Python UDF
            sleepy = F.udf(lambda _: time.sleep(3600) is None, BooleanType(), useArrow=False)
            source = source.where(sleepy(F.lit(1)))
        return layout(source, *args)

    monkeypatch.setattr(merge_module, "_layout", hanging)
    config = load_config(
        {
            "defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]},
            "operations": {
                "driver_merge_max_bytes": 0,  # written by Spark: its job is what hangs
                "merge_timeout_floor": "5s", "merge_timeout": "5s", "cool_down": "3s",
            },
        }
    )  # fmt: skip
    handler = build_handler(spark, config, warehouse, kafka)
    query = start_query(spark, handler, kafka, tmp_path / "cp", trigger_interval="500 milliseconds")
    try:
        wait(
            lambda: [r["status"] for r in results(kafka_bootstrap, kafka)] == [MergeStatus.FAILED],
            "the cancel",
        )
        failed = results(kafka_bootstrap, kafka)[0]
        assert "MergeCancelled" in failed["error"] and "past its bound of 5s" in failed["error"]
        assert handler.stats.cancelled_merges == 1
        wait(lambda: handler.stats.merges == 1, "the merge after the cool-down")
    finally:
        query.stop()
        handler.drain(30)
    statuses = [r["status"] for r in results(kafka_bootstrap, kafka)]
    assert statuses == [MergeStatus.FAILED, MergeStatus.SUCCEEDED]
    table = spark.read.format("delta").load(table_uri(warehouse, "t"))
    assert checksum(table) == before and table.select("segment_id").distinct().count() == 1


def test_a_table_whose_data_fails_every_merge_ends_quarantined_and_the_others_merge(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    load_week(spark, warehouse, kafka, "bad")
    # one of its files is no longer Parquet: every merge that reads it fails
    (victim,) = [p for p in (warehouse / "bad").rglob("*.parquet") if "bad-3" in str(p)][:1]
    victim.write_bytes(b"not parquet at all")
    config = load_config(
        {
            "defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]},
            "operations": {"quarantine_after": 2, "cool_down": "2s"},
        }
    )
    handler = build_handler(spark, config, warehouse, kafka)
    query = start_query(spark, handler, kafka, tmp_path / "cp", trigger_interval="500 milliseconds")
    try:
        wait(lambda: handler.catalog.quarantined("bad") is not None, "the quarantine")
        load_week(spark, warehouse, kafka, "good")
        wait(
            lambda: any(r["table"] == "good" for r in results(kafka_bootstrap, kafka)),
            "the other table's merge",
        )
        producer = EventProducer(kafka)
        start = JAN + timedelta(days=8)
        load_segment(
            spark, warehouse, kafka, producer, "bad", sample_rows(spark, start, start + timedelta(days=1), 5),
            start, start + timedelta(days=1), segment_id="bad-8",
        )  # fmt: skip
        producer.close()
        wait(lambda: handler.stats.quarantined_attempts >= 1, "an event of the quarantined table")
        time.sleep(5)  # past what would have been the next cool-downs
    finally:
        query.stop()
        handler.drain(30)
    note = handler.catalog.quarantined("bad")
    assert note is not None
    error, _ = quarantine_error(note)
    assert "bad-3" in error or "Parquet" in error or "parquet" in error, error
    by_table = [(r["table"], r["status"]) for r in results(kafka_bootstrap, kafka)]
    assert by_table.count(("bad", MergeStatus.FAILED)) == 2, "no attempt after the quarantine"
    assert ("good", MergeStatus.SUCCEEDED) in by_table

"""Seed 001 end to end: regions loaded at different times, consistent merges, atomic refresh."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.reads import read_catalog
from compactor.kafka.producer import EventProducer
from compactor.loader import load_sub_partition, refresh_sub_partition, sample_rows
from compactor.rules.coverage import coverage
from compactor.stream.job import build_handler
from tests.helpers.streaming import JobRunner, checksum, make_kafka

pytestmark = pytest.mark.integration

TABLE = "orders"
CONFIG = load_config(
    {
        "tables": {
            TABLE: {
                "rules": [{"rule": "auto_merge", "levels": ["week"]}],
                "sub_partition": {"column": "region", "type": "string", "values": ["eu", "us", "apac"]},
            }
        }
    }
)
MONDAY = datetime(2024, 1, 1, tzinfo=UTC)


def test_regions_merge_only_when_their_sets_agree_and_refresh_is_atomic(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    settings = CONFIG.for_table(TABLE)
    handler = build_handler(spark, CONFIG, warehouse, kafka, producer=producer, codec=default_codec())
    job = JobRunner(spark, handler, kafka, tmp_path / "cp")

    def load(day: int, region: str, rows: int = 4) -> None:
        start = MONDAY + timedelta(days=day)
        data = sample_rows(spark, start, start + timedelta(days=1), rows, seed=day).withColumn(
            "region", F.lit(region)
        )
        load_sub_partition(
            spark, warehouse, kafka, producer, settings, TABLE, data, start, start + timedelta(days=1), region,
            segment_id=f"o{start:%m%d}",
        )  # fmt: skip

    for day in range(6):
        load(day, "eu")
        load(day, "us")
    load(6, "eu")  # the US closes its books later: Sunday's US data is not there yet
    job.run_until_quiet()
    assert handler.state.stats.merges == 0, "Sunday lacks 'us', so the week's sub-partition sets differ"
    assert {s.id: sorted(s.sub_partitions) for s in handler.state.catalog.segments(TABLE)}["o0107"] == ["eu"]
    assert {s.id: s.records for s in handler.state.catalog.segments(TABLE)}["o0101"] == 8

    load(6, "us")
    job.run_until_quiet()
    (merged,) = handler.state.catalog.segments(TABLE)
    assert handler.state.stats.merges == 1
    assert merged.sub_partitions == frozenset({"eu", "us"}) and merged.records == 56
    path = table_uri(warehouse, TABLE)
    table = spark.read.format("delta").load(path)
    us_before = checksum(table.where("region = 'us'"))
    assert us_before[0] == 28

    # refresh Europe in the merged segment while a reader keeps counting
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            df = spark.read.format("delta").load(path)
            seen.append((df.where("region = 'eu'").count(), df.where("region = 'us'").count()))

    thread = threading.Thread(target=reader)
    thread.start()
    versions_before = DeltaTable.forPath(spark, path).history(1).first().version  # type: ignore[union-attr]
    fresh = sample_rows(spark, MONDAY, MONDAY + timedelta(days=7), 10, seed=99).withColumn(
        "region", F.lit("eu")
    )
    refreshed = refresh_sub_partition(
        spark,
        warehouse,
        kafka,
        producer,
        settings=settings,
        table=TABLE,
        segment_id=merged.id,
        value="eu",
        rows=fresh,
    )
    stop.set()
    thread.join()
    assert seen and set(seen) <= {(28, 28), (10, 28)}, f"readers saw a partial refresh: {set(seen)}"
    assert DeltaTable.forPath(spark, path).history(1).first().version == versions_before + 1  # type: ignore[union-attr]
    assert refreshed.records == 38

    job.run_until_quiet()
    (after,) = handler.state.catalog.segments(TABLE)
    assert after.id == merged.id and after.settled and after.records == 38
    table = spark.read.format("delta").load(path)
    assert checksum(table.where("region = 'us'")) == us_before
    assert table.where("region = 'eu'").count() == 10
    assert handler.state.stats.merges == 1 and handler.state.stats.dead_letters == 0

    # coverage from the Delta history alone
    answer = coverage(
        read_catalog(spark, warehouse, TABLE).segments(TABLE),
        ["eu", "us", "apac"],
        values=["eu", "apac", "mars"],
    )
    assert [(a.segment_id, a.values) for a in answer.answering] == [(merged.id, ("eu",))]
    assert answer.not_built == ((merged.id, "apac"),)
    assert answer.undeclared == ("mars",)

"""Seed 001 end to end: regions loaded at different times, consistent merges, atomic refresh."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.cli.main import main
from compactor.client.loader import load_sub_partition, refresh_sub_partition, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.log.reads import read_catalog
from compactor.delta.paths import table_uri
from compactor.domain.events import CompactionRequested
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.rules.coverage import coverage
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
            segment_id=f"o{start:%m%d}", indexes=["by_region"],
        )  # fmt: skip

    for day in range(6):
        load(day, "eu")
        load(day, "us")
    load(6, "eu")  # the US closes its books later: Sunday's US data is not there yet
    job.run_until_quiet()
    assert handler.stats.merges == 0, "Sunday lacks 'us', so the week's sub-partition sets differ"
    assert {s.id: sorted(s.sub_partitions) for s in handler.catalog.segments(TABLE)}["o0107"] == ["eu"]
    assert {s.id: s.records for s in handler.catalog.segments(TABLE)}["o0101"] == 8

    load(6, "us")
    job.run_until_quiet()
    (merged,) = handler.catalog.segments(TABLE)
    assert handler.stats.merges == 1
    assert merged.sub_partitions == frozenset({"eu", "us"}) and merged.records == 56
    assert merged.indexes == frozenset({"by_region"}), "a merge keeps the indexes its inputs built"
    assert read_catalog(spark, warehouse, TABLE).get(TABLE, merged.id) == merged
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
    (after,) = handler.catalog.segments(TABLE)
    assert after.id == merged.id and after.settled and after.records == 38
    table = spark.read.format("delta").load(path)
    assert checksum(table.where("region = 'us'")) == us_before
    assert table.where("region = 'eu'").count() == 10
    assert handler.stats.merges == 1 and handler.stats.dead_letters == 0

    # coverage from the Delta history alone
    answer = coverage(
        read_catalog(spark, warehouse, TABLE).segments(TABLE),
        ["eu", "us", "apac"],
        values=["eu", "apac", "mars"],
    )
    assert [(a.segment_id, a.values) for a in answer.answering] == [(merged.id, ("eu",))]
    assert answer.not_built == ((merged.id, "apac"),)
    assert answer.undeclared == ("mars",)


LIFECYCLE_COLUMNS = {
    "event_time": {"type": "timestamp"},
    "customer_id": {"type": "int"},
    "amount": {"type": "decimal(10,2)"},
    "region": {"type": "string"},
    "channel": {"type": "string"},
}


def lifecycle_config(version: int, column: str, values: list[str]) -> Any:
    return load_config(lifecycle_spec(version, column, values))


def lifecycle_spec(version: int, column: str, values: list[str]) -> dict[str, Any]:
    return {
        "tables": {
            TABLE: {
                "config_version": version,
                "layout": {
                    "time_column": "event_time",
                    "bucket_time_period": "1d",
                    "columns": LIFECYCLE_COLUMNS,
                },
                "rules": [{"rule": "refresh", "trigger": "manual", "skip_index_check": False}],
                "sub_partition": {"column": column, "type": "string", "values": values},
            }
        }
    }


def test_a_value_is_deleted_in_one_commit_then_the_column_changes_through_a_refresh(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    """Seed 001's value management on the real stack: list, search, delete, change the column."""
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    by_region = lifecycle_config(1, "region", ["eu", "us"])
    settings = by_region.for_table(TABLE)
    for day, regions in enumerate([["eu", "us"], ["eu", "us"], ["us"]]):
        start = MONDAY + timedelta(days=day)
        for region in regions:
            rows = sample_rows(spark, start, start + timedelta(days=1), 6, seed=day).select(
                "event_time", "customer_id", "amount", F.lit(region).alias("region"),
                F.when(F.col("customer_id") % 2 == 0, "web").otherwise("app").alias("channel"),
            )  # fmt: skip
            load_sub_partition(
                spark, warehouse, kafka, producer, settings, TABLE, rows, start, start + timedelta(days=1),
                region, segment_id=f"d{day}",
            )  # fmt: skip
    path = table_uri(warehouse, TABLE)
    eu_rows = checksum(spark.read.format("delta").load(path).where("region = 'eu'"))
    config_file = tmp_path / "tables.yaml"
    config_file.write_text(json.dumps(lifecycle_spec(1, "region", ["eu", "us"])))  # JSON is YAML

    listed = CliRunner().invoke(main, ["subpartitions", "list", "--table", TABLE, "--config", str(config_file),
                                       "--warehouse", str(warehouse), "--json"])  # fmt: skip
    assert listed.exit_code == 0, listed.output
    assert [(u["value"], u["built_in"]) for u in json.loads(listed.stdout)] == [
        ("eu", ["d0", "d1"]), ("us", ["d0", "d1", "d2"]),
    ]  # fmt: skip
    found = CliRunner().invoke(main, ["subpartitions", "search", "--table", TABLE, "--config", str(config_file),
                                      "--warehouse", str(warehouse), "S"])  # fmt: skip
    assert found.exit_code == 0 and "us" in found.stdout and "eu " not in found.stdout, found.output

    handler = build_handler(spark, by_region, warehouse, kafka, producer=producer, codec=default_codec())
    job = JobRunner(spark, handler, kafka, tmp_path / "cp")
    version = DeltaTable.forPath(spark, path).history(1).first().version  # type: ignore[union-attr]
    deleted = CliRunner().invoke(main, ["subpartitions", "delete", "--table", TABLE, "--value", "us",
                                        "--bootstrap-servers", kafka_bootstrap,
                                        "--segments-topic", kafka.segments_topic])  # fmt: skip
    assert deleted.exit_code == 0, deleted.output
    job.run_until_quiet()
    table = spark.read.format("delta").load(path)
    assert DeltaTable.forPath(spark, path).history(1).first().version == version + 1, "one commit"  # type: ignore[union-attr]
    assert table.where("region = 'us'").count() == 0 and checksum(table) == eu_rows
    live = {s.id: (sorted(s.sub_partitions), s.records) for s in handler.catalog.segments(TABLE)}
    assert live == {"d0": (["eu"], 6), "d1": (["eu"], 6)}, "d2 held only 'us': it is gone"
    assert read_catalog(spark, warehouse, TABLE).segments(TABLE) == handler.catalog.segments(TABLE)

    # the sub-partition column becomes the channel: a refresh re-derives each segment's values
    by_channel = lifecycle_config(2, "channel", ["web", "app"])
    handler = build_handler(spark, by_channel, warehouse, kafka, producer=producer, codec=default_codec())
    job = JobRunner(spark, handler, kafka, tmp_path / "cp2")
    request = CompactionRequested(uuid.uuid4().hex, TABLE, datetime.now(UTC), "refresh")
    producer.send_all(
        [(kafka.segments_topic, TABLE, default_codec().encode_compaction_requested(request), None)]
    )
    job.run_until_quiet()
    assert handler.stats.failed_merges == 0
    refreshed = handler.catalog.segments(TABLE)
    channels = (
        spark.read.format("delta").load(path).groupBy("segment_id").agg(F.collect_set("channel")).collect()
    )
    assert {s.id: s.sub_partitions for s in refreshed} == {r[0]: frozenset(r[1]) for r in channels}
    assert {v for s in refreshed for v in s.sub_partitions} == {"web", "app"}
    assert checksum(spark.read.format("delta").load(path)) == eu_rows, "the rows themselves are unchanged"

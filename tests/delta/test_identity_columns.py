"""Identity columns through rewrites, on real Spark and Delta: a merge (either write path) and a
refresh keep each row's identity value, leave the column's high-water mark as it was, and a load
after them still gets fresh values."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from compactor.config.loading import load_config
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.rewrite.refresh import execute_refresh
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange

pytestmark = pytest.mark.integration

HOUR = datetime(2024, 5, 1, tzinfo=UTC)


def identity_table(spark: Any, warehouse: Path) -> str:
    path = table_uri(warehouse, "t")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5), "
        "ts TIMESTAMP, k BIGINT, segment_id STRING) USING delta PARTITIONED BY (segment_id)"
    )
    return path


def load(spark: Any, warehouse: Path, n: int, rows: int = 20) -> Segment:
    """A load of keys n*1000..: its rows carry no identity value, Delta gives them theirs."""
    start = HOUR + timedelta(hours=n)
    segment = Segment(
        f"s{n}", "t", TimeRange(start, start + timedelta(hours=1)), loaded_at=start, records=rows
    )
    (
        spark.range(rows)
        .select(
            F.timestamp_seconds(F.lit(int(start.timestamp())) + F.col("id")).alias("ts"),
            (F.col("id") + n * 1000).alias("k"),
            F.lit(segment.id).alias("segment_id"),
        )
        .write.format("delta")
        .mode("append")
        .option("userMetadata", commit_metadata("load", [segment]))
        .save(table_uri(warehouse, "t"))
    )
    return segment


def values(spark: Any, path: str) -> dict[int, int]:
    rows = spark.read.format("delta").load(path).select("k", "id").collect()
    return {int(r.k): int(r.id) for r in rows}


def identity_metadata(spark: Any, path: str) -> dict[str, Any]:
    jvm = spark._jvm
    snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).update(
        False, jvm.scala.Option.empty(), jvm.scala.Option.empty()
    )
    (field,) = [f for f in json.loads(snapshot.metadata().schemaString())["fields"] if f["name"] == "id"]
    return dict(field["metadata"])


def assert_a_later_load_gets_fresh_values(spark: Any, warehouse: Path, path: str, mark: int) -> None:
    before = values(spark, path)
    load(spark, warehouse, 7)
    new = {k: v for k, v in values(spark, path).items() if k not in before}
    assert len(new) == 20 and min(new.values()) > mark and (min(new.values()) - 10) % 5 == 0
    assert len(set(values(spark, path).values())) == len(before) + 20, "no value given twice"


@pytest.mark.parametrize("driver_max_bytes", [0, 16 << 20], ids=["spark", "driver"])
def test_a_merge_keeps_identity_values_and_the_high_water_mark(
    spark: Any, warehouse: Path, driver_max_bytes: int
) -> None:
    path = identity_table(spark, warehouse)
    segments = [load(spark, warehouse, n) for n in range(3)]
    expected, identity = values(spark, path), identity_metadata(spark, path)
    assert len(set(expected.values())) == 60

    commit = execute_merge(
        spark, warehouse, make_plan("t", "minor", segments), MergeSettings(driver_max_bytes=driver_max_bytes)
    )

    assert values(spark, path) == expected and commit.records_out == 60
    assert identity_metadata(spark, path) == identity, "high-water mark and definition unchanged"
    log = Path(path, "_delta_log", f"{commit.version:020d}.json").read_text()
    assert '"metaData"' not in log, "the merge commits no metadata"
    (add,) = [json.loads(line)["add"] for line in log.splitlines() if '"add"' in line]
    written_by = str(pq.ParquetFile(Path(path, add["path"])).metadata.created_by)
    assert ("parquet-cpp-arrow" in written_by) == (driver_max_bytes > 0), "the path asked for"
    assert_a_later_load_gets_fresh_values(
        spark, warehouse, path, int(identity["delta.identity.highWaterMark"])
    )


def test_a_refresh_keeps_identity_values_and_the_high_water_mark(spark: Any, warehouse: Path) -> None:
    path = identity_table(spark, warehouse)
    segments = [load(spark, warehouse, n) for n in range(2)]
    expected, identity = values(spark, path), identity_metadata(spark, path)
    layout = {
        "time_column": "ts",
        "bucket_time_period": "1d",
        "columns": {"id": {"type": "bigint"}, "ts": {"type": "timestamp"}, "k": {"type": "bigint"}},
    }
    rule = {"rule": "refresh", "trigger": "manual", "round_bucket_time_period": "1h"}
    config = load_config({"tables": {"t": {"config_version": 2, "layout": layout, "rules": [rule]}}})

    plan = make_plan("t", "refresh", segments, allow_single=True)
    commit = execute_refresh(spark, warehouse, plan, MergeSettings.of(config.for_table("t")))

    assert values(spark, path) == expected and commit.data_change
    assert identity_metadata(spark, path) == identity
    assert_a_later_load_gets_fresh_values(
        spark, warehouse, path, int(identity["delta.identity.highWaterMark"])
    )

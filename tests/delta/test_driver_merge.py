"""A small merge written by the driver with Arrow is the file Spark would write: the same rows, the
same Delta statistics, the same Parquet footer (codec, types, statistics), with no Spark job; and it
commits in the same transaction, on a local disk and on S3."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.config.sort import SortConfig
from compactor.delta.commit.transaction import STATS_FROM_FOOTERS, DirectTransaction
from compactor.delta.files import HadoopFiles
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.index_check import footer
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.table_ops.writes import write_segment
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.plans import Commit, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import CommitConflict, StalePlan
from compactor.observe.metrics.spark_work import SparkWork
from tests.conftest import S3Server

pytestmark = pytest.mark.integration

DAY = datetime(2024, 6, 1, tzinfo=UTC)
LONG = "a string longer than Delta's thirty-two character prefix, ünïcödé"


def rows(spark: Any, day: int, n: int = 30) -> DataFrame:
    """Every primitive type a table may hold, nulls included, and strings past the stats prefix."""
    start = int((DAY + timedelta(days=day)).timestamp())
    return spark.range(n).select(
        F.timestamp_seconds(F.lit(start) + F.col("id") * 997 + F.lit(0.123456)).alias("ts"),
        F.date_add(F.lit((DAY + timedelta(days=day)).date()), F.col("id").cast("int")).alias("d"),
        (F.col("id") + day * 1000).alias("k"),
        (F.col("id") % 7).cast("int").alias("i"),
        (F.col("id") % 5).cast("short").alias("s"),
        (F.col("id") * 1.5 - day).alias("x"),
        (F.col("id") / 3).cast("float").alias("f"),
        ((F.col("id") * 104729 + day) % 100000 / 100).cast("decimal(10,2)").alias("amount"),
        F.when(F.col("id") % 4 == 0, F.lit(None)).otherwise(F.concat(F.lit(LONG), F.col("id").cast("string"))).alias("text"),
        (F.col("id") % 2 == 0).alias("flag"),
    )  # fmt: skip


def load(spark: Any, warehouse: Path | str, table: str, day: int) -> Segment:
    start = DAY + timedelta(days=day)
    segment = Segment(f"d{day}", table, TimeRange(start, start + timedelta(days=1)), loaded_at=start)
    return write_segment(spark, warehouse, segment, rows(spark, day))


def merged_file(spark: Any, warehouse: Path, table: str, commit: Commit) -> tuple[dict[str, Any], str]:
    """The `add` action of the merge's one file, and the file's local path."""
    log = warehouse / table / "_delta_log" / f"{commit.version:020d}.json"
    (add,) = [json.loads(line)["add"] for line in log.read_text().splitlines() if '"add"' in line]
    return add, str(warehouse / table / add["path"])


def footer_facts(path: str) -> dict[str, Any]:
    metadata = pq.ParquetFile(path).metadata
    group = metadata.row_group(0)
    facts: dict[str, Any] = {"rows": metadata.num_rows}
    for i in range(group.num_columns):
        column = group.column(i)
        stats = column.statistics
        facts[column.path_in_schema] = (
            column.compression,
            column.physical_type,
            str(metadata.schema.column(i).logical_type),
            stats.min if stats.has_min_max else None,
            stats.max if stats.has_min_max else None,
            stats.null_count,
        )
    return facts


@pytest.mark.parametrize("order", [None, SortConfig(by=("k",))], ids=["as-read", "sorted"])
def test_a_small_merge_in_the_driver_writes_the_file_spark_writes(
    spark: Any, warehouse: Path, order: SortConfig | None
) -> None:
    merged = {}
    for table, driver_max in (("by_driver", 16 << 20), ("by_spark", 0)):
        segments = [load(spark, warehouse, table, day) for day in range(3)]
        before = rows_checksum(spark.read.format("delta").load(table_uri(warehouse, table)))
        plan = make_plan(table, "minor", segments)
        context = spark.sparkContext
        context.setLocalProperty("spark.jobGroup.id", f"compactor-merge-{plan.plan_id}")
        work = SparkWork(spark)
        # Delta's own statistics collection, against which the driver's are compared
        spark.conf.set(STATS_FROM_FOOTERS, "false")
        try:
            commit = execute_merge(
                spark, warehouse, plan, MergeSettings(order=order, driver_max_bytes=driver_max)
            )
        finally:
            spark.conf.unset(STATS_FROM_FOOTERS)
        context.setLocalProperty("spark.jobGroup.id", None)
        after = spark.read.format("delta").load(table_uri(warehouse, table))
        assert rows_checksum(after) == before and commit.records_out == 90
        merged[table] = (*merged_file(spark, warehouse, table, commit), work.summary(1), commit)

    (driver_add, driver_path, driver_work, driver_commit) = merged["by_driver"]
    (spark_add, spark_path, spark_work, _) = merged["by_spark"]
    assert driver_work["merge_jobs"] == 0 and spark_work["merge_jobs"] == 1
    assert json.loads(driver_add["stats"]) == json.loads(spark_add["stats"]), "Delta statistics"
    driver_facts, spark_facts = footer_facts(driver_path), footer_facts(spark_path)
    # the segment id column (Delta writes partition values into files too) holds each table's own
    assert driver_facts.pop("segment_id")[3:5] == (driver_commit.outputs[0].id,) * 2
    spark_facts.pop("segment_id")
    assert driver_facts == spark_facts, "codec, types and Parquet statistics"
    assert driver_add["dataChange"] is False and driver_commit.bytes_out == driver_add["size"]
    if order is not None:  # the rows in the file, in the table's order, as Spark laid them out
        assert (
            pq.read_table(driver_path).column("k").to_pylist()
            == pq.read_table(spark_path).column("k").to_pylist()
        )


def test_the_footer_reads_the_same_in_python_and_through_hadoop(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(spark, warehouse, "t", 0)
    path = str(sorted((warehouse / "t").rglob("*.parquet"))[0])
    local = footer(spark, path)
    monkeypatch.setattr(HadoopFiles, "local_path", lambda self, uri: None)
    assert footer(spark, path) == local == ("dictionary", "snappy")
    assert footer(spark, f"file://{path}") == local


def test_a_concurrent_delete_fails_a_driver_merge_like_any_other(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segments = [load(spark, warehouse, "t", day) for day in range(2)]
    path = table_uri(warehouse, "t")
    commit = DirectTransaction.commit

    def after_a_delete(self: DirectTransaction, *args: Any, **kwargs: Any) -> int:
        DeltaTable.forPath(spark, path).delete("segment_id = 'd1' AND k % 2 = 0")
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(DirectTransaction, "commit", after_a_delete)
    with pytest.raises(CommitConflict, match="ConcurrentDeleteRead"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments))
    assert spark.read.format("delta").load(path).count() == 45


def test_direct_commits_on_an_s3_warehouse(
    spark: Any, s3: S3Server, unique: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On S3 (moto's server, through S3A): a driver merge and a Spark merge commit, a replay is
    recognised, a lagging catalog is caught, and a concurrent delete fails the commit."""
    warehouse = s3.location(unique("warehouse"))
    segments = [load(spark, warehouse, "t", day) for day in range(5)]
    path = table_uri(warehouse, "t")
    before = rows_checksum(spark.read.format("delta").load(path))
    driver = execute_merge(spark, warehouse, make_plan("t", "minor", segments[:2]))
    by_spark = execute_merge(
        spark, warehouse, make_plan("t", "minor", segments[2:4]), MergeSettings(driver_max_bytes=0)
    )
    assert rows_checksum(spark.read.format("delta").load(path)) == before
    assert (driver.records_out, by_spark.records_out) == (60, 60)
    again = execute_merge(spark, warehouse, make_plan("t", "minor", segments[:2]))
    assert again.already_done and again.version == driver.version

    with pytest.raises(StalePlan):  # d0 went in the first merge; the catalog here says otherwise
        execute_merge(spark, warehouse, make_plan("t", "minor", [segments[0], segments[4]]))

    commit = DirectTransaction.commit

    def after_a_delete(self: DirectTransaction, *args: Any, **kwargs: Any) -> int:
        DeltaTable.forPath(spark, path).delete("segment_id = 'd4'")
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(DirectTransaction, "commit", after_a_delete)
    with pytest.raises(CommitConflict):
        execute_merge(spark, warehouse, make_plan("t", "minor", [driver.outputs[0], segments[4]]))
    monkeypatch.undo()
    assert spark.read.format("delta").load(path).count() == 120
    assert HadoopFiles(spark).exists(f"{path}/_delta_log/{by_spark.version:020d}.json")

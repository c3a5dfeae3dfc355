"""A merge lays its output out in the table's order, cut into files along it, and writes files
as a modern writer does: TIMESTAMP_MICROS, the inputs' codec, statistics; rows stay exact."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable as RustDeltaTable
from pyspark.sql import functions as F

from compactor.config.loading import load_config
from compactor.config.sort import SortConfig
from compactor.delta.log.reader import RECENT_COMMITS
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.spark_store import SparkTableStore
from compactor.delta.table_ops.writes import write_segment
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.plans import MergePlan, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import ConfigError

pytestmark = pytest.mark.integration

DAY = datetime(2024, 5, 6, tzinfo=UTC)
ROWS = 3000
SEGMENTS = 4


def load_days(spark: Any, warehouse: Path, table: str) -> list[Segment]:
    """Four daily segments; customers and countries spread at random over every segment."""
    out = []
    for d in range(SEGMENTS):
        start = DAY + timedelta(days=d)
        rows = (
            spark.range(ROWS)
            .withColumn("customer_id", (F.xxhash64("id", F.lit(d)) % 100_000).cast("long"))
            .withColumn("country", F.element_at(F.array(*map(F.lit, "ABCDEFGHIJKLMNOP")), F.abs(F.xxhash64("id", F.lit(-d)) % 16).cast("int") + 1))
            .withColumn("sku", (F.abs(F.xxhash64("id", F.lit(d), F.lit(7))) % 5_000).cast("long"))
            .withColumn("event_time", (F.lit(int(start.timestamp())) + F.col("id") * 28).cast("timestamp"))
            .withColumn("amount", F.col("id") * 0.5)
        )  # fmt: skip
        segment = Segment(f"d{d}", table, TimeRange(start, start + timedelta(days=1)), loaded_at=start)
        out.append(write_segment(spark, warehouse, segment, rows))
    return out


def merged_files(spark: Any, warehouse: Path, plan: MergePlan) -> list[str]:
    table = spark.read.format("delta").load(table_uri(warehouse, plan.table))
    return sorted(table.where(F.col(SEGMENT_COLUMN) == plan.output.id).inputFiles())


def column_of(file: str, name: str) -> list[Any]:
    return pq.read_table(file.removeprefix("file:"), columns=[name]).column(name).to_pylist()  # type: ignore[no-any-return]


def merge(
    spark: Any, warehouse: Path, table: str, order: SortConfig | None, write_tasks: int | None = None
) -> tuple[MergePlan, list[str]]:
    segments = load_days(spark, warehouse, table)
    path = table_uri(warehouse, table)
    before = rows_checksum(spark.read.format("delta").load(path))
    plan = make_plan(table, "minor", segments, level=1)
    # about four files: a quarter of the inputs' bytes each
    commit = execute_merge(
        spark,
        warehouse,
        plan,
        MergeSettings(order=order, target_file_bytes=plan.bytes_in // 4 + 1, write_tasks=write_tasks),
    )
    assert commit.layout == (order.describe() if order else None), "the result names the layout applied"
    assert rows_checksum(spark.read.format("delta").load(path)) == before, "the same rows, exactly"
    return plan, merged_files(spark, warehouse, plan)


def widths(files: list[str], column: str) -> float:
    """The mean span of the files' min/max over the column's whole range (1.0: every file spans it)."""
    spans = [(min(v), max(v)) for v in (column_of(f, column) for f in files)]
    low, high = min(s[0] for s in spans), max(s[1] for s in spans)
    return sum(_rank(b) - _rank(a) for a, b in spans) / len(spans) / (_rank(high) - _rank(low))


def _rank(value: Any) -> float:
    return float(ord(value)) if isinstance(value, str) else float(value)


def test_a_linear_order_sorts_each_file_and_files_do_not_overlap(spark: Any, warehouse: Path) -> None:
    _, files = merge(spark, warehouse, "lin", SortConfig(by=("customer_id", "country")))

    assert len(files) == 4
    keys = [list(zip(column_of(f, "customer_id"), column_of(f, "country"), strict=True)) for f in files]
    assert all(k == sorted(k) for k in keys), "rows sorted within each file, by both columns in turn"
    spans = sorted((min(k), max(k)) for k in keys)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), f"ranges overlap: {spans}"
    assert sum(map(len, keys)) == ROWS * SEGMENTS


def written_by(file: str) -> tuple[int, int]:
    """Spark's name for a file it wrote: `part-<task's partition>-<job uuid>.c<file of the task>`
    (`-c` in an unpartitioned write's names, as a merge's output written as one partition is)."""
    match = re.search(r"part-(\d{5})-.*[.-]c(\d{3})", file)
    assert match, file
    return int(match[1]), int(match[2])


def test_fewer_write_tasks_than_files_cut_each_tasks_rows_into_files_along_the_order(
    spark: Any, warehouse: Path
) -> None:
    """A big merge in a job writes with fewer tasks than files (a core stays free): one task
    writes all four files in turn, each a quarter of the rows, sorted, ranges still apart."""
    _, files = merge(spark, warehouse, "one_task", SortConfig(by=("customer_id",)), write_tasks=1)

    assert sorted(written_by(f) for f in files) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    keys = [column_of(f, "customer_id") for f in files]
    assert [len(k) for k in keys] == [ROWS * SEGMENTS // 4] * 4
    assert all(k == sorted(k) for k in keys)
    spans = sorted((min(k), max(k)) for k in keys)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), f"ranges overlap: {spans}"


def test_two_write_tasks_cut_unsorted_rows_into_files_of_a_quarter_each(spark: Any, warehouse: Path) -> None:
    _, files = merge(spark, warehouse, "two_tasks", None, write_tasks=2)

    rows = {written_by(f): pq.read_metadata(f.removeprefix("file:")).num_rows for f in files}
    assert {task for task, _ in rows} == {0, 1}
    assert sum(rows.values()) == ROWS * SEGMENTS
    for (task, n), count in rows.items():  # a task's files are full but its last
        last = max(i for t, i in rows if t == task)
        assert count == ROWS * SEGMENTS // 4 if n < last else 0 < count <= ROWS * SEGMENTS // 4


def test_a_jobs_merge_leaves_a_core_free_by_default(spark: Any, warehouse: Path) -> None:
    """Through the job's store, on local[2]: Spark's two cores less one write the four files."""
    segments = load_days(spark, warehouse, "store")
    plan = make_plan("store", "minor", segments, level=1)
    settings = load_config({"defaults": {"target_file_size": plan.bytes_in // 4 + 1}}).for_table("store")
    store = SparkTableStore(spark, warehouse)

    store.commit(plan, settings)

    assert store.merge_write_tasks() == 1
    assert {task for task, _ in map(written_by, merged_files(spark, warehouse, plan))} == {0}
    assert len(merged_files(spark, warehouse, plan)) == 4
    assert SparkTableStore(spark, warehouse, write_tasks=3).merge_write_tasks() == 3


def test_a_zorder_narrows_every_files_range_on_both_columns(spark: Any, warehouse: Path) -> None:
    # two columns of many values each: Delta's curves interleave the columns' range ids, so a
    # column of a few values (a country) only splits once the other's leading bits are spent
    by = ("customer_id", "sku")
    _, plain = merge(spark, warehouse, "plain", None)
    _, zorder = merge(spark, warehouse, "z", SortConfig(by=by, curve="zorder"))
    _, hilbert = merge(spark, warehouse, "h", SortConfig(by=by, curve="hilbert"))

    assert len(zorder) == len(hilbert) == 4  # the unsorted merge coalesces the read's partitions
    for column in by:
        assert widths(plain, column) > 0.95, "unsorted: every file spans (almost) everything"
        assert widths(zorder, column) < 0.75 * widths(plain, column), column
        assert widths(hilbert, column) < 0.75 * widths(plain, column), column


@pytest.mark.parametrize("depth", [RECENT_COMMITS, 0], ids=["codec from the log", "from the snapshot"])
def test_merged_files_carry_micros_timestamps_the_inputs_codec_and_statistics(
    spark: Any, warehouse: Path, depth: int
) -> None:
    """The inputs' codec is read from a file the recent commits name, or (none of them added
    one: `depth` 0) from the snapshot's files."""
    spark.conf.set("spark.sql.parquet.compression.codec", "zstd")
    try:
        segments = load_days(spark, warehouse, "modern")  # the loads write zstd, as their writer chose
    finally:
        spark.conf.unset("spark.sql.parquet.compression.codec")
    plan = make_plan("modern", "minor", segments, level=1)
    execute_merge(spark, warehouse, plan, MergeSettings(depth=depth, order=SortConfig(by=("event_time",))))

    (file,) = merged_files(spark, warehouse, plan)
    meta = pq.ParquetFile(file.removeprefix("file:"))
    schema = meta.schema_arrow
    assert str(schema.field("event_time").type) == "timestamp[us, tz=UTC]"
    column = meta.schema.column(schema.get_field_index("event_time"))
    assert column.physical_type == "INT64", "not INT96"
    group = meta.metadata.row_group(0)
    codecs = {group.column(i).compression for i in range(group.num_columns)}
    assert codecs == {"ZSTD"}
    stats = group.column(schema.get_field_index("event_time")).statistics
    assert stats is not None and stats.has_min_max
    rust = RustDeltaTable(table_uri(warehouse, "modern")).to_pyarrow_table()
    assert rust.num_rows == ROWS * SEGMENTS and set(rust["segment_id"].to_pylist()) == {plan.output.id}


def test_an_order_on_a_column_the_table_lacks_fails_the_merge_with_its_name(
    spark: Any, warehouse: Path
) -> None:
    segments = load_days(spark, warehouse, "bad")
    plan = make_plan("bad", "minor", segments, level=1)
    with pytest.raises(
        ConfigError, match=r"table bad: sort.by column\(s\) \['region'\] are not in the table's columns"
    ):
        execute_merge(
            spark, warehouse, plan, MergeSettings(order=SortConfig(by=("region", "country"), curve="zorder"))
        )
    table = spark.read.format("delta").load(table_uri(warehouse, "bad"))
    assert table.select(SEGMENT_COLUMN).distinct().count() == SEGMENTS, "nothing committed"

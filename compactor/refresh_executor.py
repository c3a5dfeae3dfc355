"""Spark + Delta side of segment refresh: the index check and the conforming rewrite."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType

from compactor.config import LayoutConfig, RefreshRule
from compactor.delta_executor import (
    SEGMENT_COLUMN,
    _find_commit,
    _in_list,
    _metadata,
    check_rewritable,
    physical_names,
    table_path,
)
from compactor.domain import MergePlan, Origin, Segment, TimeRange
from compactor.errors import CompactorError
from compactor.rules.refresh import HIDDEN_COLUMNS, IndexFacts, layout_record

log = logging.getLogger(__name__)

_CODECS = {"SNAPPY": "snappy", "ZSTD": "zstd", "GZIP": "gzip", "UNCOMPRESSED": "uncompressed"}


def _spark_type(data_type: DataType) -> tuple[str, bool]:
    if isinstance(data_type, ArrayType):
        return data_type.elementType.simpleString(), True
    return data_type.simpleString(), False


def _footer(spark: SparkSession, file: str) -> tuple[str, str]:
    """(encoding, compression) of a Parquet file, read from its footer."""
    jvm: Any = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
        jvm.org.apache.hadoop.fs.Path(file), conf
    )
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
    try:
        blocks = reader.getFooter().getBlocks()
        if blocks.isEmpty():
            return "dictionary", "snappy"
        column = blocks.get(0).getColumns().get(0)
        encodings = {str(e) for e in column.getEncodings()}
        encoding = "dictionary" if encodings & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"} else "plain"
        return encoding, _CODECS.get(str(column.getCodec().name()), str(column.getCodec().name()).lower())
    finally:
        reader.close()


def _partition_id(column: Column, layout: LayoutConfig) -> Column:
    assert layout.partitioning is not None
    n = layout.partitioning.num_partitions
    value = F.hash(column) if layout.partitioning.function == "murmur" else column.cast("long")
    return F.pmod(value, F.lit(n))


def index_facts(
    spark: SparkSession, warehouse: Path | str, table: str, segment: Segment, layout: LayoutConfig
) -> IndexFacts:
    """The costly index check: inspect one segment's files and rows."""
    rows = (
        DeltaTable.forPath(spark, str(table_path(warehouse, table)))
        .toDF()
        .where(F.col(SEGMENT_COLUMN) == segment.id)
    )
    files = sorted(rows.inputFiles())
    if not files:
        return IndexFacts({}, 0, 0, True, layout.encoding, layout.compression)
    physical = spark.read.parquet(files[0]).schema
    logical = physical_names(spark, table_path(warehouse, table))  # column mapping: col-<uuid> -> name
    columns = {
        logical.get(f.name, f.name): _spark_type(f.dataType)
        for f in physical.fields
        if logical.get(f.name, f.name) not in HIDDEN_COLUMNS
    }
    period = int(layout.bucket_time_period.total_seconds())
    stats = []
    if layout.time_column in columns:
        stats.append(
            F.countDistinct(
                F.floor(F.unix_seconds(F.col(layout.time_column).cast("timestamp")) / period)
            ).alias("buckets")
        )
    if layout.partitioning and layout.partitioning.column in columns:
        stats.append(
            F.countDistinct(_partition_id(F.col(layout.partitioning.column), layout)).alias("partitions")
        )
    found = rows.agg(*stats).first() if stats else None
    buckets = int(found["buckets"]) if found is not None and "buckets" in found else 1
    partitions = int(found["partitions"]) if found is not None and "partitions" in found else 0
    in_order = True
    if layout.sorted_column and layout.sorted_column in columns:
        for file in files:
            df = (
                spark.read.parquet(file)
                .select(layout.sorted_column)
                .withColumn("__i", F.monotonically_increasing_id())
            )
            df = df.withColumn("__prev", F.lag(layout.sorted_column).over(Window.orderBy("__i")))
            if df.where(F.col("__prev") > F.col(layout.sorted_column)).limit(1).count():
                in_order = False
                break
    encoding, compression = _footer(spark, files[0])
    return IndexFacts(columns, buckets, partitions, in_order, encoding, compression)


def _conform(df: DataFrame, layout: LayoutConfig, rule: RefreshRule) -> DataFrame:
    """Rows as the layout wants them: columns added (default), removed, cast; time rounded;
    rolled up or de-duplicated as `merge_type` says."""
    existing = {f.name: f.dataType for f in df.schema.fields}
    columns = []
    for name, column in layout.columns.items():
        target = f"array<{column.type}>" if column.multi_value else column.type
        if name not in existing:
            value = F.lit(column.default).cast(column.type)
            expr = F.array(value) if column.multi_value and column.default is not None else value
        else:
            expr = F.col(name)
            was_array = isinstance(existing[name], ArrayType)
            if was_array and not column.multi_value:
                expr = F.element_at(expr, 1)
            elif column.multi_value and not was_array:
                expr = F.when(expr.isNull(), F.lit(None)).otherwise(F.array(expr))
        columns.append(expr.cast(target).alias(name))
    out = df.select(*columns)
    if rule.round_bucket_time_period is not None:
        step = int(rule.round_bucket_time_period.total_seconds())
        t = F.col(layout.time_column).cast("timestamp")
        out = out.withColumn(
            layout.time_column, F.timestamp_seconds(F.floor(F.unix_seconds(t) / step) * step)
        )
    if rule.merge_type == "dedup":
        out = out.dropDuplicates()
    elif rule.merge_type == "rollup":
        metrics = dict(rule.aggregations)
        dimensions = [c for c in out.columns if c not in metrics]
        # sum widens decimals and ints; the column keeps the layout's type (Delta has one schema)
        aggregated = [
            getattr(F, how)(F.col(m)).cast(out.schema[m].dataType).alias(m) for m, how in metrics.items()
        ]
        out = out.groupBy(*dimensions).agg(*aggregated).select(*layout.columns)
    return out


@dataclass(frozen=True, slots=True)
class RewriteResult:
    version: int
    outputs: tuple[Segment, ...]
    records_out: int
    bytes_out: int
    duration_ms: int
    already_done: bool = False
    data_change: bool = True


def changes_data(source: DataFrame, conformed: DataFrame, rule: RefreshRule, table_wide: bool) -> bool:
    """Does the rewrite change rows, or only how they are laid out (split, sorted, encoded)?

    Rollup, dedup and time rounding change rows; so does any column added, dropped or
    retyped, which always shows as a schema difference (and a table-wide rewrite is one).
    """
    if table_wide or rule.merge_type != "concat" or rule.round_bucket_time_period is not None:
        return True
    before = {(f.name, f.dataType.simpleString()) for f in source.schema.fields if f.name != SEGMENT_COLUMN}
    after = {(f.name, f.dataType.simpleString()) for f in conformed.schema.fields}
    return before != after


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set a SQL conf for one write: Spark copies SQL confs into the Hadoop conf the
    Parquet writer reads (Delta does not pass `parquet.*` writer options through).
    Session-wide while it lasts, so concurrent writes in this session see it too."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


class ConcurrentTableChange(CompactorError):
    """The table changed under a table-wide refresh: retry it against the new version."""


def _version(table: DeltaTable) -> int:
    row = table.history(1).select("version").first()
    return int(row.version) if row else -1


def execute_refresh(
    spark: SparkSession,
    warehouse: Path | str,
    plan: MergePlan,
    layout: LayoutConfig,
    rule: RefreshRule,
    config_version: int,
    table_wide: bool,
) -> RewriteResult:
    """Rewrite the plan's inputs into conforming outputs in ONE Delta commit.

    Each output holds one time bucket and (with partitioning) one partition,
    split into chunks that approach `max_records_per_segment` and
    `desired_segment_size`, rows sorted by the sorted column, written with the
    layout's compression and encoding. Output ids derive from the plan id, so a
    replay is recognised (txnAppId) and writes nothing twice. A table-wide plan
    (a column removed, a type changed) overwrites the whole table with its new schema.
    """
    started = time.monotonic()
    path = table_path(warehouse, plan.table)
    marker = f'"plan_id":"{plan.plan_id}"'
    done = _find_commit(path, marker)
    prefix = f"r-{plan.plan_id[:16]}"
    if done is not None:
        return RewriteResult(
            done.version, (), done.records, done.bytes, 0, already_done=True, data_change=done.data_change
        )
    table = DeltaTable.forPath(spark, str(path))
    check_rewritable(spark, path)
    read_version = _version(table)
    inputs = list(plan.input_ids)
    source = table.toDF() if table_wide else table.toDF().where(F.col(SEGMENT_COLUMN).isin(inputs))
    rows = _conform(source, layout, rule)
    data_change = changes_data(source, rows, rule, table_wide)
    period = int(layout.bucket_time_period.total_seconds())
    bucket = F.floor(F.unix_seconds(F.col(layout.time_column).cast("timestamp")) / period) * period
    partition = _partition_id(F.col(layout.partitioning.column), layout) if layout.partitioning else F.lit(0)
    in_records = max(1, sum(s.records for s in plan.inputs))
    row_bytes = max(1.0, sum(s.bytes for s in plan.inputs) / in_records)
    per_chunk = max(1, min(rule.max_records_per_segment, int(rule.desired_segment_size / row_bytes)))
    order = F.col(layout.sorted_column) if layout.sorted_column else F.col(layout.time_column)
    ranked = Window.partitionBy("__bucket", "__partition").orderBy(order, *[F.col(c) for c in layout.columns])
    keyed = (
        rows.withColumn("__bucket", bucket)
        .withColumn("__partition", partition)
        .withColumn("__chunk", F.floor((F.row_number().over(ranked) - 1) / per_chunk))
        .withColumn(
            SEGMENT_COLUMN,
            F.concat_ws(
                "-",
                F.lit(prefix),
                F.col("__bucket").cast("string"),
                F.col("__partition").cast("string"),
                F.col("__chunk").cast("string"),
            ),
        )
    ).persist()
    try:
        summary = keyed.groupBy(SEGMENT_COLUMN, "__bucket").count().collect()
        built_with = layout_record(layout, config_version)
        outputs = tuple(
            Segment(
                id=r[SEGMENT_COLUMN],
                table=plan.table,
                range=TimeRange(
                    datetime.fromtimestamp(int(r["__bucket"]), UTC),
                    datetime.fromtimestamp(int(r["__bucket"]), UTC) + timedelta(seconds=period),
                ),
                loaded_at=plan.output.loaded_at,
                records=int(r["count"]),
                sub_partitions=plan.output.sub_partitions,
                origin=Origin.REFRESH,
                built_with=built_with,
            )
            for r in sorted(summary, key=lambda r: r[SEGMENT_COLUMN])
        )
        data = keyed.drop("__bucket", "__partition", "__chunk").repartition(F.col(SEGMENT_COLUMN))
        if layout.sorted_column:
            data = data.sortWithinPartitions(SEGMENT_COLUMN, layout.sorted_column)
        removed = [s.id for s in (plan.inputs)]
        writer = (
            data.write.format("delta")
            .mode("overwrite")
            .option("txnAppId", f"compactor-plan-{plan.plan_id}")
            .option("txnVersion", 1)
            .option("dataChange", str(data_change).lower())
            .option("userMetadata", _metadata("refresh", list(outputs), tuple(removed), plan, data_change))
            .option("compression", layout.compression if layout.compression != "uncompressed" else "none")
        )
        if table_wide:
            # An overwrite deletes whatever the table holds when it commits: refuse if
            # anything committed since the rows were read (the caller retries).
            if _version(table) != read_version:
                raise ConcurrentTableChange(f"{plan.table} changed during a table-wide refresh; retry")
            writer = writer.option("overwriteSchema", "true").partitionBy(SEGMENT_COLUMN)
        else:
            predicate = f"{SEGMENT_COLUMN} IN ({_in_list(inputs)}) OR {SEGMENT_COLUMN} LIKE '{prefix}-%'"
            writer = writer.option("replaceWhere", predicate).option("mergeSchema", "true")
        with _session_conf(spark, "parquet.enable.dictionary", str(layout.encoding == "dictionary").lower()):
            writer.save(str(path))
    finally:
        keyed.unpersist()
    version, records, size, _ = _find_commit(path, marker) or (-1, 0, 0, data_change)
    elapsed = int((time.monotonic() - started) * 1000)
    return RewriteResult(version, outputs, records, size, elapsed, data_change=data_change)

"""Segment refresh: drifted segments rewritten into conforming outputs in ONE Delta commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession, Window
from pyspark.sql import functions as F

from compactor.config.built_with import layout_record
from compactor.config.layout import LayoutConfig
from compactor.config.rules import RefreshRule
from compactor.config.sort import SortConfig, describe
from compactor.delta.arrange import sort_each_file
from compactor.delta.commit_metadata import commit_metadata, plan_marker
from compactor.delta.conform import changes_data, conform
from compactor.delta.files import HadoopFiles
from compactor.delta.index_check import partition_id
from compactor.delta.log import RECENT_COMMITS, DeltaLogReader
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.predicates import in_list
from compactor.delta.reads import app_id, committed
from compactor.delta.snapshot import check_rewritable
from compactor.domain.layout import refresh_output_prefix
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import Origin, Segment, TimeRange
from compactor.errors import CommitConflict

_KEYS = ("__bucket", "__partition", "__chunk")


def execute_refresh(
    spark: SparkSession,
    warehouse: Path | str,
    plan: MergePlan,
    layout: LayoutConfig,
    rule: RefreshRule,
    config_version: int,
    depth: int = RECENT_COMMITS,
    log: DeltaLogReader | None = None,
    sub_column: str | None = None,
    order: SortConfig | None = None,
    whole: bool = False,
) -> Commit:
    """Rewrite the plan's inputs into conforming outputs in ONE Delta commit, rows in `order`.

    Each output holds one time bucket and (with partitioning) one partition, split into chunks
    toward `max_records_per_segment` and `desired_segment_size`, in the layout's compression and
    encoding (`order`: the table's `layout_order`). Output ids derive from the plan id, so a replay
    is recognised (txnAppId) and returns the first run's outputs. A table-wide plan overwrites
    the whole table with its new schema.
    `whole` (an upsert table, seed 004: M:1): one output with the inputs' range and rows.
    """
    started = time.monotonic()
    path = table_uri(warehouse, plan.table)
    table = DeltaTable.forPath(spark, path)
    log = log or DeltaLogReader(HadoopFiles(spark), path, plan.table)
    done = committed(spark, log, plan.plan_id, depth)
    if done is not None:
        return Commit(done.version, done.added, done.records, done.bytes, 0, True, done.data_change)
    check_rewritable(spark, path)
    read_version = _version(table)
    source = (
        table.toDF()
        if plan.table_wide
        else table.toDF().where(F.col(SEGMENT_COLUMN).isin(list(plan.input_ids)))
    )
    rows = conform(source, layout, rule)
    data_change = changes_data(source, rows, rule, plan.table_wide)
    keyed = _keyed(rows, plan, layout, rule, whole).persist()
    try:
        outputs = _outputs(keyed, plan, layout, config_version, sub_column, whole)
        writer = _writer(keyed, plan, layout, order, outputs, data_change)
        if plan.table_wide and _version(table) != read_version:
            # an overwrite deletes whatever the table holds when it commits: never rows read after
            raise CommitConflict(f"{plan.table} changed during a table-wide refresh; retry")
        with _session_conf(spark, "parquet.enable.dictionary", str(layout.encoding == "dictionary").lower()):
            writer.save(path)
    finally:
        keyed.unpersist()
    facts = log.written(plan_marker(plan.plan_id))
    elapsed = int((time.monotonic() - started) * 1000)
    return Commit(
        facts.version,
        outputs,
        facts.records,
        facts.bytes,
        elapsed,
        data_change=data_change,
        layout=describe(order),
    )


def _keyed(
    rows: DataFrame, plan: MergePlan, layout: LayoutConfig, rule: RefreshRule, whole: bool
) -> DataFrame:
    """Each row's output: its time bucket, value partition and size chunk, as a segment id (one
    output for every row when the plan's segments are kept `whole`)."""
    keyed = rows.withColumns(
        {"__bucket": F.lit(int(plan.output.range.start_ts)), "__partition": F.lit(0), "__chunk": F.lit(0)}
        if whole
        else _bucket_partition_chunk(plan, layout, rule)
    )
    parts = [F.lit(refresh_output_prefix(plan.plan_id)), *(F.col(k).cast("string") for k in _KEYS)]
    return keyed.withColumn(SEGMENT_COLUMN, F.concat_ws("-", *parts))


def _bucket_partition_chunk(plan: MergePlan, layout: LayoutConfig, rule: RefreshRule) -> dict[str, Column]:
    """A row's time bucket, value partition and size chunk within them."""
    period = int(layout.bucket_time_period.total_seconds())
    bucket = F.floor(F.unix_seconds(F.col(layout.time_column).cast("timestamp")) / period) * period
    partition = partition_id(F.col(layout.partitioning.column), layout) if layout.partitioning else F.lit(0)
    row_bytes = max(1.0, plan.bytes_in / max(1, plan.records_in))
    per_chunk = max(1, min(rule.max_records_per_segment, int(rule.desired_segment_size / row_bytes)))
    order = F.col(layout.sorted_column) if layout.sorted_column else F.col(layout.time_column)
    ranked = Window.partitionBy(bucket, partition).orderBy(order, *[F.col(c) for c in layout.columns])
    return {
        "__bucket": bucket,
        "__partition": partition,
        "__chunk": F.floor((F.row_number().over(ranked) - 1) / per_chunk),
    }


def _outputs(
    keyed: DataFrame,
    plan: MergePlan,
    layout: LayoutConfig,
    config_version: int,
    sub_column: str | None,
    whole: bool = False,
) -> tuple[Segment, ...]:
    """The segments the rewrite writes, one per output id, with their exact row counts and, for a
    sub-partitioned table, the values their rows hold (the column may have changed)."""
    period = timedelta(seconds=layout.bucket_time_period.total_seconds())
    built_with = layout_record(layout, config_version)
    values = F.collect_set(F.col(sub_column).cast("string")) if sub_column in keyed.columns else F.lit(None)
    summary = (
        keyed.groupBy(SEGMENT_COLUMN, "__bucket")
        .agg(F.count("*").alias("count"), values.alias("values"))
        .collect()
    )
    return tuple(
        Segment(
            id=r[SEGMENT_COLUMN],
            table=plan.table,
            range=plan.output.range
            if whole
            else TimeRange(start := datetime.fromtimestamp(int(r["__bucket"]), UTC), start + period),
            loaded_at=plan.output.loaded_at,
            records=int(r["count"]),
            sub_partitions=plan.output.sub_partitions if r["values"] is None else frozenset(r["values"]),
            origin=Origin.REFRESH,
            built_with=built_with,
        )
        for r in sorted(summary, key=lambda r: r[SEGMENT_COLUMN])
    )


def _writer(
    keyed: DataFrame,
    plan: MergePlan,
    layout: LayoutConfig,
    order: SortConfig | None,
    outputs: tuple[Segment, ...],
    data_change: bool,
) -> DataFrameWriter:
    data = sort_each_file(keyed.drop(*_KEYS).repartition(F.col(SEGMENT_COLUMN)), order, SEGMENT_COLUMN)
    metadata = commit_metadata("refresh", list(outputs), plan.input_ids, plan, data_change)
    writer = (
        data.write.format("delta")
        .mode("overwrite")
        .option("txnAppId", app_id(plan.plan_id))
        .option("txnVersion", 1)
        .option("dataChange", str(data_change).lower())
        .option("userMetadata", metadata)
        .option("compression", layout.compression if layout.compression != "uncompressed" else "none")
    )
    if plan.table_wide:
        return writer.option("overwriteSchema", "true").partitionBy(SEGMENT_COLUMN)
    prefix = refresh_output_prefix(plan.plan_id)
    predicate = f"{SEGMENT_COLUMN} IN ({in_list(plan.input_ids)}) OR {SEGMENT_COLUMN} LIKE '{prefix}-%'"
    return writer.option("replaceWhere", predicate).option("mergeSchema", "true")


def _version(table: DeltaTable) -> int:
    row = table.history(1).select("version").first()
    return int(row.version) if row else -1


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

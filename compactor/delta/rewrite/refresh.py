"""Segment refresh: drifted segments rewritten into conforming outputs in ONE Delta commit."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from compactor.config.built_with import layout_record
from compactor.config.layout import LayoutConfig
from compactor.config.rules import RefreshRule
from compactor.config.sort import describe
from compactor.delta.commit.transaction import DirectTransaction, segment_predicate
from compactor.delta.content.fingerprint import (
    fingerprinted_columns,
    hash_total,
    observe,
    observed,
    row_hash_sums,
    spark_fingerprint,
    table_columns,
)
from compactor.delta.features import overwrite_refusal
from compactor.delta.log.commit_metadata import commit_metadata, plan_marker
from compactor.delta.log.live_files import LiveFile, LiveFileIndex
from compactor.delta.log.reader import CommitFacts, segment_partition_value
from compactor.delta.paths import SEGMENT_COLUMN
from compactor.delta.predicates import in_list
from compactor.delta.rewrite.arrange import sort_each_file
from compactor.delta.rewrite.conform import changes_data, conform
from compactor.delta.rewrite.index_check import partition_id
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.rewrite.one_commit import Produced, rewrite_in_one_commit
from compactor.domain.certificate import Certificate, Fingerprint
from compactor.domain.layout import refresh_output_prefix
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import Origin, Segment, TimeRange
from compactor.errors import CommitConflict, ContentMismatch, UnsupportedTableFeature

_KEYS = ("__bucket", "__partition", "__chunk")


def execute_refresh(
    spark: SparkSession,
    warehouse: Path | str,
    plan: MergePlan,
    settings: MergeSettings,
    live: LiveFileIndex | None = None,
    guard: Callable[[], None] = lambda: None,
) -> Commit:
    """Rewrite the plan's inputs into conforming outputs in ONE Delta commit, rows in `order`.

    Each output holds one time bucket and (with partitioning) one partition, split into chunks
    toward `max_records_per_segment` and `desired_segment_size`, in the layout's compression and
    encoding (`order`: the table's `layout_order`), all from the table's `settings`. Output
    ids derive from the plan id, so a replay finds the first run's commit by its plan id and
    returns its outputs. An upsert table's refresh is M:1 (Pinot keeps one segment per upsert
    partition): one output with the inputs' range and rows. `live`: the table's live files and
    log reader, kept by the caller (None: read afresh).

    The commit is direct (`transaction`), as a merge's is, while the outputs keep the table's
    schema. A table-wide plan (a new schema for every segment), a layout that changes the
    schema, or a table the direct commit does not serve yet, overwrite through Delta's generic
    write instead (`replaceWhere`; table-wide: the whole table, `overwriteSchema`). That write
    keeps neither row ids nor identity values: on a table with row tracking or an identity
    column such a refresh is refused (`UnsupportedTableFeature`), and nothing is committed.
    Rows keep their row ids and commit versions as `conform` says.

    A direct refresh is certified (`settings.certify`): the rows the rule's transformation makes
    of the inputs (cast, rounded, rolled up or de-duplicated, as a reader sees the inputs) are
    fingerprinted in the aggregation that sizes the outputs, the rows handed to Delta's writer in
    the write's own job, and the commit happens only if the two are equal. The transformation
    itself is the rule's: a rollup's sums are what `conform` computes.
    """
    step = _RefreshStep(spark, plan, settings)
    return rewrite_in_one_commit(spark, warehouse, plan, settings.depth, step, live, guard)


@dataclass(frozen=True)
class _RefreshStep:
    """A refresh's own step: the inputs' rows conformed to the layout and cut into outputs,
    written for the direct commit, or through Delta's generic overwrite where it must."""

    spark: SparkSession
    plan: MergePlan
    settings: MergeSettings
    kind: str = "refresh"

    def replayed(self, facts: CommitFacts) -> Commit:
        return Commit(facts.version, facts.added, facts.records, facts.bytes, 0, True, facts.data_change)

    def produce(
        self,
        txn: DirectTransaction,
        live: LiveFileIndex,
        files: Mapping[str, list[LiveFile]],
        guard: Callable[[], None],
    ) -> Produced | Commit:
        started = time.monotonic()
        spark, plan, settings = self.spark, self.plan, self.settings
        layout, rule = settings.refresh_rule(plan.table)
        order, whole = settings.order, settings.upsert is not None
        inputs = [f for sid in plan.input_ids for f in files.get(sid, [])]
        direct = not plan.table_wide and txn.fallback_reason() is None
        if not direct:
            _check_overwrite(
                txn, "a table-wide refresh" if plan.table_wide else "a table the direct commit does not serve"
            )
        tracking = txn.row_tracking
        source = (
            txn.read(inputs, segment_predicate(plan.input_ids))
            if direct
            else _snapshot_rows(spark, txn.path, plan)
        )
        rows = conform(source, layout, rule, tracking if direct else None)
        if direct and not _keeps_schema(rows, txn.metadata, tracking or ()):
            _check_overwrite(txn, "a layout that changes the table's schema")
            direct, source = False, _snapshot_rows(spark, txn.path, plan)
            rows = conform(source, layout, rule)
        data_change = changes_data(source, rows, rule, plan.table_wide, tracking or ())
        # certified: the rows the rule's transformation made of the inputs, against those written
        # (the table's columns; through the overwrite, the rows' own: it may change the schema)
        columns = None
        if settings.certify:
            columns = table_columns(txn.metadata) if direct else list(rows.columns)
        keyed = _keyed(rows, plan, layout, rule, whole).persist()
        try:
            outputs, conformed = _outputs(
                keyed, plan, layout, settings.config_version, settings.sub_column, whole, columns
            )
            data = sort_each_file(
                keyed.drop(*_KEYS).repartition(F.col(SEGMENT_COLUMN)), order, SEGMENT_COLUMN
            )
            written = None
            if columns is not None and direct:
                data, written = observe(data, columns)
            codec = layout.compression if layout.compression != "uncompressed" else "none"
            with _session_conf(
                spark, "parquet.enable.dictionary", str(layout.encoding == "dictionary").lower()
            ):
                if direct:
                    adds = txn.write(data, {"compression": codec})
                else:
                    certificate = _before_overwrite(plan, data, columns, conformed)
                    if not plan.table_wide and not _appends_columns(txn, rows.columns):
                        certificate = None  # checked, but `verify` would read another column order
                    guard()
                    _overwrite(spark, txn, data, plan, outputs, data_change, codec, certificate)
        finally:
            keyed.unpersist()
        if direct:
            certificate = (
                Certificate(conformed, observed(written))
                if conformed is not None and written is not None
                else None
            )
            return Produced(
                adds, inputs, _sized(outputs, adds), data_change, describe(order), certificate=certificate
            )
        facts = live.log.written(plan_marker(plan.plan_id))
        elapsed = int((time.monotonic() - started) * 1000)
        return Commit(
            facts.version,
            outputs,
            facts.records,
            facts.bytes,
            elapsed,
            data_change=data_change,
            layout=describe(order),
            certificate=certificate,
        )


def _appends_columns(txn: DirectTransaction, columns: list[str]) -> bool:
    """Do `columns` keep the table's, in its order, with any new ones after them? Then the table
    reads them in that order after a partial overwrite (`mergeSchema` keeps the table's columns
    and appends the new ones), and a certificate over them is what `verify` recomputes."""
    before = fingerprinted_columns(table_columns(txn.metadata))  # the segment id is never hashed
    return fingerprinted_columns(columns)[: len(before)] == before


def _before_overwrite(
    plan: MergePlan, data: DataFrame, columns: list[str] | None, conformed: Fingerprint | None
) -> Certificate | None:
    """The certificate of a refresh through Delta's generic overwrite, which commits as it writes:
    the rows about to be handed to the writer (a job of their own, over the cached rows the rule
    made) against those the rule made of the inputs; `ContentMismatch` and nothing written when
    they differ (None: certificates off)."""
    if columns is None or conformed is None:
        return None
    certificate = Certificate(conformed, spark_fingerprint(data, columns))
    if not certificate.holds:
        raise ContentMismatch(
            f"table {plan.table}: plan {plan.plan_id} not committed: {certificate.mismatch()}"
        )
    return certificate


def _snapshot_rows(spark: SparkSession, path: str, plan: MergePlan) -> DataFrame:
    """The inputs' rows read from the snapshot (the generic overwrite's read; table-wide: all)."""
    rows = DeltaTable.forPath(spark, path).toDF()
    return rows if plan.table_wide else rows.where(F.col(SEGMENT_COLUMN).isin(list(plan.input_ids)))


def _check_overwrite(txn: DirectTransaction, why: str) -> None:
    """`UnsupportedTableFeature` when the table cannot take Delta's generic overwrite, which a
    refresh needs for `why`."""
    refused = overwrite_refusal(txn.protocol, txn.metadata)
    if refused is not None:
        raise UnsupportedTableFeature(
            f"table at {txn.path}: {why} needs Delta's generic overwrite, and {refused}"
        )


def _keeps_schema(rows: DataFrame, metadata: dict[str, Any], hidden: Collection[str] = ()) -> bool:
    """Do the conformed rows (with their segment id) have the table's columns and types?
    `hidden`: columns that are not the table's (row tracking's), left out."""
    table = StructType.fromJson(json.loads(metadata["schemaString"]))
    wanted = {(f.name, f.dataType.simpleString()) for f in table.fields}
    written = {(f.name, f.dataType.simpleString()) for f in rows.schema.fields if f.name not in hidden}
    return wanted == written | {(SEGMENT_COLUMN, "string")}


def _sized(outputs: tuple[Segment, ...], adds: list[dict[str, Any]]) -> tuple[Segment, ...]:
    """The outputs with the bytes of the files written for each."""
    size: dict[str, int] = {}
    for add in adds:
        sid = segment_partition_value(add)
        if sid is not None:
            size[sid] = size.get(sid, 0) + int(add.get("size") or 0)
    return tuple(replace(o, bytes=size.get(o.id, 0)) for o in outputs)


def _overwrite(
    spark: SparkSession,
    txn: DirectTransaction,
    data: DataFrame,
    plan: MergePlan,
    outputs: tuple[Segment, ...],
    data_change: bool,
    codec: str,
    certificate: Certificate | None,
) -> None:
    """The rewrite as Delta's generic overwrite, by predicate (table-wide: the whole table),
    with the certificate taken before it in its metadata."""
    if plan.table_wide and _version(spark, txn.path) != txn.read_version:
        # an overwrite deletes whatever the table holds when it commits: never rows read after
        raise CommitConflict(f"{plan.table} changed during a table-wide refresh; retry")
    metadata = commit_metadata(
        "refresh", list(outputs), plan.input_ids, plan, data_change, certificate=certificate
    )
    writer = (
        data.write.format("delta")
        .mode("overwrite")
        .option("dataChange", str(data_change).lower())
        .option("userMetadata", metadata)
        .option("compression", codec)
    )
    if plan.table_wide:
        writer.option("overwriteSchema", "true").partitionBy(SEGMENT_COLUMN).save(txn.path)
        return
    prefix = refresh_output_prefix(plan.plan_id)
    predicate = f"{SEGMENT_COLUMN} IN ({in_list(plan.input_ids)}) OR {SEGMENT_COLUMN} LIKE '{prefix}-%'"
    writer.option("replaceWhere", predicate).option("mergeSchema", "true").save(txn.path)


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
    columns: list[str] | None = None,
) -> tuple[tuple[Segment, ...], Fingerprint | None]:
    """The segments the rewrite writes, one per output id, with their exact row counts and, for a
    sub-partitioned table, the values their rows hold (the column may have changed); and, given
    the table's `columns`, the fingerprint of the rows to write, taken in the same aggregation."""
    period = timedelta(seconds=layout.bucket_time_period.total_seconds())
    built_with = layout_record(layout, config_version)
    values = F.collect_set(F.col(sub_column).cast("string")) if sub_column in keyed.columns else F.lit(None)
    digest = row_hash_sums(keyed, columns, "digest") if columns is not None else []
    summary = (
        keyed.groupBy(SEGMENT_COLUMN, "__bucket")
        .agg(F.count("*").alias("count"), values.alias("values"), *digest)
        .collect()
    )
    fingerprint = (
        Fingerprint.of(
            sum(int(r["count"]) for r in summary), sum(hash_total(r.asDict(), "digest") for r in summary)
        )
        if columns is not None
        else None
    )
    segments = tuple(
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
    return segments, fingerprint


def _version(spark: SparkSession, path: str) -> int:
    row = DeltaTable.forPath(spark, path).history(1).select("version").first()
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

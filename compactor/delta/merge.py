"""A merge: the plan's input segments replaced by its output in ONE Delta commit."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.config.layout import UpsertConfig
from compactor.config.sort import SortConfig, describe
from compactor.delta.arrange import arrange
from compactor.delta.commit_metadata import commit_metadata, plan_marker
from compactor.delta.files import HadoopFiles
from compactor.delta.index_check import footer
from compactor.delta.log import RECENT_COMMITS, CommitFacts, DeltaLogReader
from compactor.delta.paths import SEGMENT_COLUMN, TARGET_FILE_BYTES, table_uri
from compactor.delta.predicates import in_list
from compactor.delta.promote import PROMOTE_MIN_FILE_BYTES, promote
from compactor.delta.reads import app_id, committed
from compactor.delta.snapshot import check_rewritable
from compactor.delta.upsert import LoadOrder, order_frame, valid_rows_of
from compactor.domain.plans import Commit, MergePlan


def execute_merge(
    spark: SparkSession,
    warehouse: Path | str,
    plan: MergePlan,
    upsert: UpsertConfig | None = None,
    depth: int = RECENT_COMMITS,
    log: DeltaLogReader | None = None,
    load_order: LoadOrder | None = None,
    promote_min_bytes: int | None = PROMOTE_MIN_FILE_BYTES,
    order: SortConfig | None = None,
    target_file_bytes: int = TARGET_FILE_BYTES,
    write_tasks: int | None = None,
) -> Commit:
    """Replace the plan's input segments with its output in ONE Delta commit.

    Idempotent: the write carries `txnAppId = plan id`, so Delta itself skips a
    plan it has already committed (a replayed batch, a duplicate event), and a
    replay returns that commit (`already_done`). The replace predicate names only
    the inputs (and the output id, which the written rows carry), so rows
    appended concurrently are never touched. With `upsert`, only the inputs'
    valid rows (latest per key over the whole table) are written: the rest are
    dropped in the same commit.

    A plain merge moves inputs made of files of `promote_min_bytes` or more (`promote`).
    The output is laid out in `order` (`arrange`), in files of about `target_file_bytes`,
    written by at most `write_tasks` Spark tasks (None: one per file), each cutting its rows
    into files in turn.
    A plain merge only rearranges rows, so its adds and removes carry
    `dataChange=false` (as Delta's OPTIMIZE does): streaming readers and the change
    feed skip it. Upsert compaction drops rows, so it commits as a data change.
    """
    started = time.monotonic()
    path = table_uri(warehouse, plan.table)
    table = DeltaTable.forPath(spark, path)
    log = log or DeltaLogReader(HadoopFiles(spark), path, plan.table)
    done = committed(spark, log, plan.plan_id, depth)
    if done is not None:
        return _merged(plan, done, 0, order, already_done=True)
    check_rewritable(spark, path)
    moved = None if upsert is not None else _moved(spark, path, plan, promote_min_bytes)
    if moved is not None:
        return moved
    data_change = upsert is not None
    inputs = list(plan.input_ids)
    source = _source(spark, table, inputs, upsert, load_order)
    files = max(1, math.ceil(plan.bytes_in / target_file_bytes))
    # fewer tasks than files: each task cuts its rows into files of the target's share of rows
    # (a plan that does not know its rows keeps a task per file)
    tasks = files if write_tasks is None or plan.records_in <= 0 else min(files, write_tasks)
    rows_per_file = math.ceil(plan.records_in / files) if tasks < files else None
    output = arrange(source.withColumn(SEGMENT_COLUMN, F.lit(plan.output.id)), order, tasks, plan.table)
    writing = time.time()
    codec = _codec_of(spark, source, log, inputs, depth)
    _replace_inputs(output, path, plan, codec, data_change, rows_per_file)
    done_at = time.time()
    facts = log.written(plan_marker(plan.plan_id))
    merged = _merged(plan, facts, int((time.monotonic() - started) * 1000), order)
    write_ms, commit_ms = phases(writing, facts.timestamp_ms, done_at)
    return replace(merged, write_ms=write_ms, commit_ms=commit_ms)


def _replace_inputs(
    output: DataFrame, path: str, plan: MergePlan, codec: str, data_change: bool, rows_per_file: int | None
) -> None:
    """One Delta commit: the output's rows in, the inputs' rows out, marked with the plan."""
    inputs = list(plan.input_ids)
    writer = output.write
    if rows_per_file is not None:
        writer = writer.option("maxRecordsPerFile", rows_per_file)
    (
        writer.format("delta")
        .mode("overwrite")
        .option("compression", codec)
        # Delta checks every written row against this predicate, testing the IN list in order
        # (unoptimised): the output id, which every row carries, goes first so that costs one
        # comparison per row, not one per input (a third of a 200-segment merge's time).
        .option("replaceWhere", f"{SEGMENT_COLUMN} IN ({in_list([plan.output.id, *inputs])})")
        .option("txnAppId", app_id(plan.plan_id))
        .option("txnVersion", 1)
        .option("dataChange", str(data_change).lower())
        .option("userMetadata", commit_metadata("merge", [plan.output], plan.input_ids, plan, data_change))
        .save(path)
    )


def phases(writing: float, committed_ms: int | None, done_at: float) -> tuple[int | None, int | None]:
    """A write's two phases: its files (from the start to the commit's timestamp, which Delta
    takes once they are written) and its commit (from there to the end); None if unknown."""
    if committed_ms is None or not writing * 1000 <= committed_ms <= done_at * 1000:
        return None, None  # another clock (a driver elsewhere), or no timestamp: not guessed
    return int(committed_ms - writing * 1000), int(done_at * 1000 - committed_ms)


def _source(
    spark: SparkSession,
    table: DeltaTable,
    inputs: list[str],
    upsert: UpsertConfig | None,
    load_order: LoadOrder | None,
) -> DataFrame:
    """The inputs' rows; of an upsert table, only the valid ones (latest per key)."""
    if upsert is not None:
        return valid_rows_of(table.toDF(), inputs, upsert, order_frame(spark, load_order or {}))
    return table.toDF().where(F.col(SEGMENT_COLUMN).isin(inputs))


def _codec_of(
    spark: SparkSession, source: DataFrame, log: DeltaLogReader, inputs: list[str], depth: int
) -> str:
    """The compression codec of the inputs' files (a file's footer), so that a merge keeps the
    table's codec whoever wrote it; Spark's default when there is none to read. The file comes
    from the recent commits the idempotency check has just read; only when none of them added
    one is it asked of the snapshot (a Spark job, a third of a small merge's time)."""
    recent = log.newest_file(set(inputs), depth)
    try:
        codec = footer(spark, recent, table=log.table_uri)[1] if recent is not None else None
    except Py4JJavaError:  # the file is gone (a later rewrite, then VACUUM): ask the snapshot
        codec = None
    if codec is None:
        files = sorted(source.inputFiles())
        if not files:
            return str(spark.conf.get("spark.sql.parquet.compression.codec", "snappy"))
        codec = footer(spark, files[0])[1]
    return "none" if codec == "uncompressed" else codec


def _moved(spark: SparkSession, path: str, plan: MergePlan, min_bytes: int | None) -> Commit | None:
    """The plan committed by moving its well-sized inputs' files, or None (nothing committed). A
    segment under the threshold cannot be made of well-sized files: small merges skip the look."""
    if min_bytes is None or all(s.bytes < min_bytes for s in plan.inputs):
        return None
    return promote(spark, path, plan, min_bytes)


def _merged(
    plan: MergePlan,
    facts: CommitFacts,
    duration_ms: int,
    order: SortConfig | None,
    already_done: bool = False,
) -> Commit:
    output = replace(plan.output, records=facts.records, bytes=facts.bytes)
    return Commit(
        facts.version,
        (output,),
        facts.records,
        facts.bytes,
        duration_ms,
        already_done,
        facts.data_change,
        describe(order),
    )

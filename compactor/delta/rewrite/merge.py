"""A merge: the plan's input segments replaced by its output in ONE Delta commit."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.config.layout import UpsertConfig
from compactor.config.sort import SortConfig, describe
from compactor.delta.commit.transaction import DirectTransaction, segment_predicate
from compactor.delta.log.commit_metadata import commit_metadata, plan_marker
from compactor.delta.log.live_files import LiveFile, LiveFileIndex, LiveFiles
from compactor.delta.log.reader import CommitFacts, DeltaLogReader
from compactor.delta.paths import SEGMENT_COLUMN
from compactor.delta.predicates import in_list
from compactor.delta.rewrite.arrange import arrange, reads_twice
from compactor.delta.rewrite.driver_merge import refusal, write_in_driver
from compactor.delta.rewrite.index_check import footer
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.rewrite.one_commit import (
    Handed,
    Produced,
    SecondOpinion,
    certified_write,
    rewrite_in_one_commit,
    rows_held,
)
from compactor.delta.rewrite.promote import promote
from compactor.delta.rewrite.upsert import LoadOrder, index_row_hash, order_frame, valid_rows_of
from compactor.domain.certificate import IndexedWinners
from compactor.domain.plans import Commit, MergePlan

DEFAULT_SETTINGS = MergeSettings()  # a table with no merge options of its own (tests, tools)


def execute_merge(
    spark: SparkSession,
    warehouse: Path | str,
    plan: MergePlan,
    settings: MergeSettings = DEFAULT_SETTINGS,
    live: LiveFileIndex | None = None,
    load_order: LoadOrder | None = None,
    guard: Callable[[], None] = lambda: None,
    winners: IndexedWinners | None = None,
) -> Commit:
    """Replace the plan's input segments with its output in ONE Delta commit (`one_commit`).

    The commit is direct (`transaction`): the inputs' files come from `live` (the table's
    live files, kept from its log), are confirmed live at the transaction's read version, read
    through an explicit file list, and removed in the commit that adds the output's files.
    A table whose features the direct commit does not serve yet takes Delta's generic
    overwrite (`replaceWhere` on the inputs' ids) instead. With `upsert`, only the inputs'
    valid rows (latest per key over the whole table) are written: the rest are dropped in the
    same commit. `load_order`: when each segment was loaded (upsert tables break ties with it).
    `winners`: what the table's key index said the inputs win, checked against the rows the
    merge keeps (the certificate's `Winners`) when the table read is the one the index knew.

    `settings` (the table's, built once): a plain merge moves inputs made of files of
    `promote_min_bytes` or more (`promote`). The output is laid out in `order` (`arrange`), in
    files of about `target_file_bytes`, written by at most `write_tasks` Spark tasks (None: one
    per file), each cutting its rows into files in turn; a plain merge of at most
    `driver_max_bytes` (and one output file) is written by the driver with Arrow instead
    (`driver_merge`), when its inputs allow.
    A plain merge only rearranges rows, so its adds and removes carry
    `dataChange=false` (as Delta's OPTIMIZE does): streaming readers and the change
    feed skip it. Upsert compaction drops rows, so it commits as a data change.
    Every row written keeps its row id and commit version on a table with row tracking (an
    upsert's winner its own), and its identity values (`features`).
    """
    step = _MergeStep(spark, plan, settings, load_order, winners)
    return rewrite_in_one_commit(spark, warehouse, plan, settings.depth, step, live, guard)


@dataclass(frozen=True)
class _MergeStep:
    """A merge's own step: promote well-sized inputs, or write the output in the driver
    (small plain merges) or in Spark tasks."""

    spark: SparkSession
    plan: MergePlan
    settings: MergeSettings
    load_order: LoadOrder | None
    winners: IndexedWinners | None = None
    kind: str = "merge"

    def replayed(self, facts: CommitFacts) -> Commit:
        return _merged(self.plan, facts, 0, self.settings.order, already_done=True)

    def produce(
        self,
        txn: DirectTransaction,
        live: LiveFileIndex,
        files: Mapping[str, list[LiveFile]],
        guard: Callable[[], None],
    ) -> Produced | Commit:
        spark, plan, settings = self.spark, self.plan, self.settings
        upsert, order = settings.upsert, settings.order
        if txn.fallback_reason() is not None:
            guard()
            return _overwrite_merge(spark, txn.path, plan, settings, self.load_order, live.log)
        inputs = [f for sid in plan.input_ids for f in files.get(sid, [])]
        if upsert is None and settings.promote_min_bytes is not None:
            moved = promote(txn, plan, files, settings.promote_min_bytes, settings.certify)
            if moved is not None:
                return moved
        codec = codec_of(spark, inputs, txn.path)
        driver_max = min(settings.driver_max_bytes, settings.target_file_bytes)
        in_driver = upsert is None and not refusal(
            txn.protocol, txn.metadata, inputs, plan.output.id, order, driver_max
        )
        if in_driver:  # a small merge: Arrow in the driver, no Spark job
            txn.track(inputs, segment_predicate(plan.input_ids))
            add, certificate = write_in_driver(
                live.files,
                txn.path,
                txn.metadata,
                inputs,
                plan.output.id,
                order,
                codec,
                txn.row_tracking,
                settings.certify,
            )
            adds = [add]
            txn.count_written(adds, output_size(adds, txn)[0])
        else:
            second = None
            if upsert is not None:  # validity is judged against every row of the table
                table = live.at(txn.read_version)
                table_rows = txn.read(table.everything(), None)
                source = valid_rows_of(
                    table_rows, list(plan.input_ids), upsert, order_frame(spark, self.load_order or {})
                )
                second = self._second_opinion(table, source)
            else:
                source = txn.read(inputs, segment_predicate(plan.input_ids))
            into = {SEGMENT_COLUMN: plan.output.id}  # every row written is the output's
            if settings.certify:
                adds, certificate = certified_write(
                    txn,
                    source,
                    lambda rows, handed: _layout(rows, plan, settings, codec, handed),
                    reads_twice(settings.order, _file_count(plan, settings)),
                    second,
                    into,
                )
            else:
                adds, certificate = txn.write(*_layout(source, plan, settings, codec), into), None
        records, size = output_size(adds, txn)
        output = replace(plan.output, records=records, bytes=size)
        return Produced(adds, inputs, (output,), upsert is not None, describe(order), certificate=certificate)

    def _second_opinion(self, table: LiveFiles, kept: DataFrame) -> SecondOpinion | None:
        """The key index's word on the winners, when the table read is the one it knew."""
        expected, upsert = self.winners, self.settings.upsert
        if expected is None or upsert is None or not expected.applies_to(visible_rows(table)):
            return None
        nullable = {f.name for f in kept.schema.fields if f.nullable}
        if len(upsert.primary_key) > 1 and nullable & set(upsert.primary_key):
            # the index hashes a key with xxhash64, which skips nulls: (NULL, 5) and (5, NULL) are
            # one key to it and two to the merge, so such keys would be refused every time
            return None
        return SecondOpinion(index_row_hash(kept), expected.winners)


def visible_rows(table: LiveFiles) -> dict[str, int | None]:
    """Each live segment's rows as a reader sees them (None: a file without statistics)."""
    rows: dict[str, int | None] = {}
    for file in table.everything():
        had, visible = rows.get(file.segment, 0), file.visible
        rows[file.segment] = None if had is None or visible is None else had + visible
    return rows


def _file_count(plan: MergePlan, settings: MergeSettings) -> int:
    """How many files of about `target_file_bytes` the plan's output makes."""
    return max(1, math.ceil(plan.bytes_in / settings.target_file_bytes))


def output_size(adds: list[dict[str, Any]], txn: DirectTransaction) -> tuple[int, int]:
    """(rows, bytes) of the files a transaction wrote: rows from their statistics, or from
    Delta's write metrics where a file has none."""
    size = sum(int(a.get("size") or 0) for a in adds)
    held = rows_held(adds)
    return (held if held is not None else txn.written_rows() or 0), size


def _layout(
    source: DataFrame,
    plan: MergePlan,
    settings: MergeSettings,
    codec: str,
    handed: Handed = lambda rows: rows,
) -> tuple[DataFrame, dict[str, str]]:
    """The output's rows in the settings' order, partitioned for the write, and the writer's
    options: files of about `target_file_bytes`; fewer tasks than files cut their rows into
    files of the target's share of rows (a plan that does not know its rows keeps a task per
    file). `handed`: what the rows to write pass through (`arrange`)."""
    files = _file_count(plan, settings)
    write_tasks = settings.write_tasks
    tasks = files if write_tasks is None or plan.records_in <= 0 else min(files, write_tasks)
    options = {"compression": codec}
    if tasks < files:
        options["maxRecordsPerFile"] = str(math.ceil(plan.records_in / files))
    output = arrange(
        source.withColumn(SEGMENT_COLUMN, F.lit(plan.output.id)), settings.order, tasks, plan.table, handed
    )
    return output, options


def _overwrite_merge(
    spark: SparkSession,
    path: str,
    plan: MergePlan,
    settings: MergeSettings,
    load_order: LoadOrder | None,
    log: DeltaLogReader,
) -> Commit:
    """The merge as Delta's generic overwrite: the inputs' rows read from the snapshot and
    replaced by predicate (`replaceWhere`), for a table the direct commit does not serve."""
    started = time.monotonic()
    source = _source(
        spark, DeltaTable.forPath(spark, path), list(plan.input_ids), settings.upsert, load_order
    )
    files = sorted(source.inputFiles())
    codec = codec_of(spark, [], path, files[0] if files else None)
    output, options = _layout(source, plan, settings, codec)
    data_change = settings.upsert is not None
    writing = time.time()
    _replace_inputs(output, path, plan, options, data_change)
    done_at = time.time()
    facts = log.written(plan_marker(plan.plan_id))
    merged = _merged(plan, facts, int((time.monotonic() - started) * 1000), settings.order)
    write_ms, commit_ms = phases(writing, facts.timestamp_ms, done_at)
    return replace(merged, write_ms=write_ms, commit_ms=commit_ms)


def _replace_inputs(
    output: DataFrame, path: str, plan: MergePlan, options: dict[str, str], data_change: bool
) -> None:
    """One Delta commit: the output's rows in, the inputs' rows out, marked with the plan."""
    inputs = list(plan.input_ids)
    (
        output.write.format("delta")
        .mode("overwrite")
        .options(**options)
        # Delta checks every written row against this predicate, testing the IN list in order
        # (unoptimised): the output id, which every row carries, goes first so that costs one
        # comparison per row, not one per input (a third of a 200-segment merge's time).
        .option("replaceWhere", f"{SEGMENT_COLUMN} IN ({in_list([plan.output.id, *inputs])})")
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


def codec_of(spark: SparkSession, inputs: list[LiveFile], path: str, file: str | None = None) -> str:
    """The compression codec of the inputs' files (a file's footer: no Spark job), so that a
    merge keeps the table's codec whoever wrote it; Spark's default when there is none to read.
    `file`: an absolute path to read instead (the generic overwrite's input files)."""
    if file is None and not inputs:
        return str(spark.conf.get("spark.sql.parquet.compression.codec", "snappy"))
    first = inputs[0] if file is None else None
    codec = (
        footer(spark, first.path, path, first.size)[1] if first is not None else footer(spark, str(file))[1]
    )
    return "none" if codec == "uncompressed" else codec


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

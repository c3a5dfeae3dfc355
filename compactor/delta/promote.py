"""A merge by metadata alone: well-sized input files move into the output segment, unrewritten.

When every file of a plan's inputs is already near the target size, rewriting them would copy
each byte only to give its rows a new segment id. Delta readers take a file's partition values
from the log, not from its path, and a commit may add a file the table already holds to replace
its metadata (the protocol; Delta's own statistics recomputation does so). One commit therefore
re-adds each input file with the output's `segment_id` and `dataChange=false`:

- readers see the old segments or the new one, never a mix (one commit);
- time travel to an older version still sees the old ids (its log says so);
- VACUUM keeps the files, which the table still references, and deletes them only after a
  later merge rewrites them;
- the transaction reads the inputs' files, so a concurrent delete of one of them fails the
  commit as a conflict, and it carries the plan's `SetTransaction`, so a replay is skipped.

A file keeps its path: its directory names the segment it was loaded as, which only readers
that guess partitions from paths instead of reading the Delta log would misread.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from compactor.delta.commit_metadata import commit_metadata
from compactor.delta.conflicts import conflicts_as_commit_conflict
from compactor.delta.paths import SEGMENT_COLUMN, TARGET_FILE_BYTES
from compactor.delta.predicates import in_list
from compactor.delta.reads import app_id
from compactor.domain.plans import Commit, MergePlan

INCREMENTAL_CHECKSUM = "spark.databricks.delta.incremental.commit.enabled"
# A file at least this large is kept as it is: a rewrite would not make it better sized.
PROMOTE_MIN_FILE_BYTES = TARGET_FILE_BYTES // 2


def promote(
    spark: SparkSession, path: str, plan: MergePlan, min_file_bytes: int = PROMOTE_MIN_FILE_BYTES
) -> Commit | None:
    """Commit `plan` moving the files of its well-sized inputs (every file at least
    `min_file_bytes`) into the output segment and rewriting only the other inputs, in one
    transaction; None (nothing committed) when no input is well sized, or when an input has no
    file or a file has no row count (the caller rewrites everything, as before)."""
    jvm: Any = spark._jvm
    with _full_checksum(jvm, spark) as session:
        return _promote(spark, jvm, session, path, plan, min_file_bytes)


@contextmanager
def _full_checksum(jvm: Any, spark: SparkSession) -> Iterator[Any]:
    """A session of its own, active in this thread for the commit, whose checksum file (the
    table's file count and size at the version) is computed from the whole state. Delta derives
    it incrementally by default, counting every `add` as a new file: a re-added file would make
    it wrong, and the next checkpoint would fail its integrity check."""
    sessions = jvm.org.apache.spark.sql.SparkSession
    session = spark._jsparkSession.newSession()
    session.conf().set(INCREMENTAL_CHECKSUM, "false")
    previous = sessions.getActiveSession()
    sessions.setActiveSession(session)
    try:
        yield session
    finally:
        if previous.isDefined():
            sessions.setActiveSession(previous.get())
        else:
            sessions.clearActiveSession()


def _promote(
    spark: SparkSession, jvm: Any, session: Any, path: str, plan: MergePlan, min_file_bytes: int
) -> Commit | None:
    started = time.monotonic()
    inputs = list(plan.input_ids)
    txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(session, path).startTransaction()
    files = _read_files(spark, jvm, txn, path, inputs)
    by_segment: dict[str, list[Any]] = {}
    for f in files:
        by_segment.setdefault(_segment_of(f), []).append(f)
    kept = {sid for sid, group in by_segment.items() if all(f.size() >= min_file_bytes for f in group)}
    if not kept or set(by_segment) != set(inputs) or any(_live_rows(f) is None for f in files):
        return None
    now = int(time.time() * 1000)
    moved = [_moved(jvm, f, plan.output.id) for sid in kept for f in by_segment[sid]]
    rewritten = sorted(set(inputs) - kept)
    small = [f for sid in rewritten for f in by_segment[sid]]
    written = _rewrite(spark, jvm, txn, path, plan, rewritten, small) if small else []
    removed = [f.removeWithTimestamp(now, False) for f in small]
    new_files = moved + written
    records = sum(_live_rows(f) or 0 for f in new_files)
    size = sum(int(f.size()) for f in new_files)
    output = replace(plan.output, records=records, bytes=size)
    option = jvm.scala.Option
    marker = jvm.org.apache.spark.sql.delta.actions.SetTransaction(
        app_id(plan.plan_id), 1, option.apply(jvm.java.lang.Long.valueOf(now))
    )
    operation = jvm.org.apache.spark.sql.delta.DeltaOperations.Write(
        jvm.org.apache.spark.sql.SaveMode.Overwrite,
        option.apply(_seq(jvm, [SEGMENT_COLUMN])),
        option.apply(f"{SEGMENT_COLUMN} IN ({in_list(inputs)})"),
        option.apply(commit_metadata("merge", [output], plan.input_ids, plan, False, exact_sizes=True)),
        option.empty(), option.empty(), option.empty(), option.empty(), option.empty(),
    )  # fmt: skip
    with conflicts_as_commit_conflict():
        version = int(txn.commit(_seq(jvm, [*new_files, *removed, marker]), operation))
    duration_ms = int((time.monotonic() - started) * 1000)
    return Commit(version, (output,), records, size, duration_ms, already_done=False, data_change=False)


def _read_files(spark: SparkSession, jvm: Any, txn: Any, path: str, inputs: list[str]) -> list[Any]:
    """The inputs' files (with their row counts), read in the transaction: a concurrent delete of
    one of them makes the commit a conflict."""
    condition = F.col(SEGMENT_COLUMN).isin(inputs)
    resolved = (
        spark.read.format("delta").load(path).where(condition)._jdf.queryExecution().analyzed().condition()
    )
    return list(_java_list(jvm, txn.filterFiles(_seq(jvm, [resolved]), True)))


def _moved(jvm: Any, f: Any, segment_id: str) -> Any:
    """The file re-added under `segment_id`, everything else as it was (`dataChange=false`)."""
    key = str(f.partitionValues().keys().head())  # the partition column's name in the log
    values = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({key: segment_id})
    return f.copy(
        f.path(), values, f.size(), f.modificationTime(), False, f.stats(), f.tags(), f.deletionVector(),
        f.baseRowId(), f.defaultRowCommitVersion(), f.clusteringProvider(), f.backReference(), f.amtPassthrough(),
    )  # fmt: skip


def _rewrite(
    spark: SparkSession,
    jvm: Any,
    txn: Any,
    path: str,
    plan: MergePlan,
    segment_ids: list[str],
    files: list[Any],
) -> list[Any]:
    """The small inputs' rows (`segment_ids`, whose `files` they are) written as new files of the
    output segment, in the transaction."""
    size = sum(int(f.size()) for f in files)
    rows = spark.read.format("delta").load(path).where(F.col(SEGMENT_COLUMN).isin(segment_ids))
    data = rows.withColumn(SEGMENT_COLUMN, F.lit(plan.output.id)).coalesce(
        max(1, math.ceil(size / TARGET_FILE_BYTES))
    )
    added = _java_list(jvm, txn.writeFiles(data._jdf))
    return [_moved(jvm, f, plan.output.id) for f in added]  # the same file, dataChange=false


def _segment_of(file: Any) -> str:
    """The file's segment id: its one partition value (under column mapping the log keys it by
    the column's physical name, `col-<uuid>`)."""
    return str(file.partitionValues().values().head())


def _live_rows(file: Any) -> int | None:
    """The file's rows from its statistics, less those its deletion vector removes."""
    stats = json.loads(file.stats() or "{}")
    if "numRecords" not in stats:
        return None
    deleted = file.deletionVector().cardinality() if file.deletionVector() is not None else 0
    return int(stats["numRecords"]) - int(deleted)


def _seq(jvm: Any, items: list[Any]) -> Any:
    values = jvm.java.util.ArrayList()
    for item in items:
        values.add(item)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(values).toSeq()


def _java_list(jvm: Any, seq: Any) -> Any:
    return jvm.scala.jdk.javaapi.CollectionConverters.asJava(seq)

"""Spark + Delta execution: write segments, run merge plans, read back the truth.

Every table lives at `<warehouse>/<table>`, partitioned by `segment_id`, so a
merge touches only its inputs' partitions and concurrent appends of new
segments never conflict with it. Each load and merge records what it did in the
commit's `userMetadata`; the catalog is rebuilt from that history.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.catalog import CommitRecord, SegmentCatalog
from compactor.config import UpsertConfig
from compactor.domain import MergePlan, Segment, validate_table_name
from compactor.errors import CompactorError, TableNotFoundError, UnsupportedTableFeature
from compactor.segments_json import segment_from_dict, segment_to_dict
from compactor.table_features import refused_features

log = logging.getLogger(__name__)

SEGMENT_COLUMN = "segment_id"
METADATA_KEY = "compactor"
TARGET_FILE_BYTES = 256 * 1024 * 1024


def table_path(warehouse: Path | str, table: str) -> Path:
    """The table's directory; refuses any name that would leave the warehouse."""
    root = Path(warehouse).resolve()
    path = (root / validate_table_name(table)).resolve()
    if path.parent != root:
        raise CompactorError(f"table {table!r} resolves to {path}, outside the warehouse {root}")
    return path


def table_exists(spark: SparkSession, warehouse: Path | str, table: str) -> bool:
    return DeltaTable.isDeltaTable(spark, str(table_path(warehouse, table)))


def list_tables(warehouse: Path | str) -> list[str]:
    root = Path(warehouse)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir())


def _metadata(
    op: str,
    added: list[Segment],
    removed: tuple[str, ...] = (),
    plan: MergePlan | None = None,
    data_change: bool = True,
) -> str:
    """The commit's userMetadata: what it did to the segment set, which plan did it, and
    whether it changed rows (False: the commit only rearranged them, `dataChange=false`)."""
    return json.dumps(
        {
            METADATA_KEY: 1,
            "op": op,
            "added": [segment_to_dict(s) for s in added],
            "removed": list(removed),
            "plan_id": plan.plan_id if plan else None,
            "rule": plan.rule if plan else None,
            "level": plan.level if plan else None,
            "pool": plan.pool if plan else None,
            "data_change": data_change,
        },
        separators=(",", ":"),
    )


def _commit_files(path: Path) -> list[tuple[int, Path]]:
    """The table's commit files, newest first.

    Commits are `_delta_log/<version, 20 digits>.json` (the Delta protocol), so
    a directory listing answers "what was committed lately" in milliseconds,
    where `DeltaTable.history()` costs a Spark round trip (~0.2 s) per call.
    """
    commits = []
    with os.scandir(path / "_delta_log") as entries:
        for entry in entries:
            stem, _, ext = entry.name.partition(".")
            if ext == "json" and len(stem) == 20 and stem.isdigit():
                commits.append((int(stem), Path(entry.path)))
    return sorted(commits, reverse=True)


def _recent_commits(path: Path, depth: int) -> Iterator[tuple[int, list[str]]]:
    """(version, JSON lines) of the last `depth` commits, newest first."""
    for version, file in _commit_files(path)[:depth]:
        try:
            yield version, file.read_text().splitlines()
        except FileNotFoundError:  # removed by log cleanup after the listing
            continue


class CommitFacts(NamedTuple):
    """What one of our commits recorded: its version, rows and bytes written, and whether
    it changed data (commits written before that was recorded all did)."""

    version: int
    records: int
    bytes: int
    data_change: bool = True


def _find_commit(path: Path, marker: str, depth: int = 50) -> CommitFacts | None:
    """The newest of the last `depth` commits whose metadata mentions `marker`."""
    for version, lines in _recent_commits(path, depth):
        for line in lines:
            info = json.loads(line).get("commitInfo") if '"commitInfo"' in line else None
            if info is not None and marker in (info.get("userMetadata") or ""):
                metrics = info.get("operationMetrics") or {}
                meta = _parse_metadata(info.get("userMetadata")) or {}
                return CommitFacts(
                    version,
                    int(metrics.get("numOutputRows", 0)),
                    int(metrics.get("numOutputBytes", 0)),
                    bool(meta.get("data_change", True)),
                )
    return None


def _commit_metrics(path: Path, marker: str) -> CommitFacts:
    found = _find_commit(path, marker)
    if found is None:
        raise CompactorError(f"commit for {marker} not found in the last 50 versions of {path}")
    return found


def write_segment(spark: SparkSession, warehouse: Path | str, segment: Segment, rows: DataFrame) -> Segment:
    """Append `rows` as `segment` (one Delta commit) and return it with exact counts.

    The segment id column is set here; records and bytes are read back from the
    commit's metrics so the event carries what Delta actually holds.
    """
    path = table_path(warehouse, segment.table)
    data = rows.withColumn(SEGMENT_COLUMN, F.lit(segment.id))
    writer = data.write.format("delta").mode("append").option("userMetadata", _metadata("load", [segment]))
    if not DeltaTable.isDeltaTable(spark, str(path)):
        writer = writer.partitionBy(SEGMENT_COLUMN)
    writer.save(str(path))
    facts = _commit_metrics(path, f'"id":"{segment.id}"')
    return replace(segment, records=facts.records, bytes=facts.bytes)


@dataclass(frozen=True, slots=True)
class Execution:
    """What a plan's execution did; `already_done` when a replay found it committed."""

    version: int
    records_out: int
    bytes_out: int
    duration_ms: int
    already_done: bool = False
    data_change: bool = True


def _in_list(ids: list[str]) -> str:
    # ids are validated against a strict pattern (no quotes), so literal quoting is safe
    return ", ".join(f"'{i}'" for i in ids)


def execute_merge(
    spark: SparkSession, warehouse: Path | str, plan: MergePlan, upsert: UpsertConfig | None = None
) -> Execution:
    """Replace the plan's input segments with its output in ONE Delta commit.

    Idempotent: the write carries `txnAppId = plan id`, so Delta itself skips a
    plan it has already committed (a replayed batch, a duplicate event). The
    replace predicate names only the inputs (and the output id, which the
    written rows carry), so rows appended concurrently are never touched. With
    `upsert`, only the inputs' valid rows (latest per key over the whole table)
    are written: the rest are dropped in the same commit.

    A plain merge only rearranges rows, so its adds and removes carry
    `dataChange=false` (as Delta's OPTIMIZE does): streaming readers and the change
    feed skip it. Upsert compaction drops rows, so it commits as a data change.
    """
    started = time.monotonic()
    path = table_path(warehouse, plan.table)
    marker = f'"plan_id":"{plan.plan_id}"'
    app_id = f"compactor-plan-{plan.plan_id}"
    table = DeltaTable.forPath(spark, str(path))
    done = _find_commit(path, marker)
    if done is not None:  # fast path; the txnAppId below guards older history too
        return Execution(*done[:3], duration_ms=0, already_done=True, data_change=done.data_change)
    check_rewritable(spark, path)
    data_change = upsert is not None
    inputs = list(plan.input_ids)
    if upsert is not None:
        from compactor.upsert_view import valid_rows_of  # Spark-side upsert logic lives there

        source = valid_rows_of(table.toDF(), inputs, upsert)
    else:
        source = table.toDF().where(F.col(SEGMENT_COLUMN).isin(inputs))
    files = max(1, math.ceil(sum(s.bytes for s in plan.inputs) / TARGET_FILE_BYTES))
    output = source.withColumn(SEGMENT_COLUMN, F.lit(plan.output.id)).coalesce(files)
    (
        output.write.format("delta")
        .mode("overwrite")
        # Delta checks every written row against this predicate, testing the IN list in order
        # (unoptimised): the output id, which every row carries, goes first so that costs one
        # comparison per row, not one per input (a third of a 200-segment merge's time).
        .option("replaceWhere", f"{SEGMENT_COLUMN} IN ({_in_list([plan.output.id, *inputs])})")
        .option("txnAppId", app_id)
        .option("txnVersion", 1)
        .option("dataChange", str(data_change).lower())
        .option("userMetadata", _metadata("merge", [plan.output], plan.input_ids, plan, data_change))
        .save(str(path))
    )
    facts = _commit_metrics(path, marker)
    elapsed = int((time.monotonic() - started) * 1000)
    return Execution(facts.version, facts.records, facts.bytes, elapsed, data_change=data_change)


def _snapshot(spark: SparkSession, path: Path | str) -> Any:
    """The JVM snapshot Delta last loaded for `path` (callers open the table first)."""
    jvm: Any = spark._jvm
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, str(path)
    ).unsafeVolatileSnapshot()


def check_rewritable(spark: SparkSession, path: Path) -> None:
    """Refuse a table whose features a rewrite would not preserve (see `table_features`).

    Reads the protocol and metadata of the snapshot Delta just loaded for the
    write (`DeltaTable.forPath`), so it costs no extra log replay.
    """
    snapshot = _snapshot(spark, path)
    protocol = json.loads(snapshot.protocol().json())["protocol"]
    metadata = json.loads(snapshot.metadata().json())["metaData"]
    refused = refused_features(protocol, metadata)
    if refused:
        raise UnsupportedTableFeature(f"table at {path}: " + "; ".join(refused))


def read_commits(spark: SparkSession, warehouse: Path | str, table: str) -> list[CommitRecord]:
    """Every compactor commit of `table`, oldest first, from the Delta history."""
    path = table_path(warehouse, table)
    if not DeltaTable.isDeltaTable(spark, str(path)):
        raise TableNotFoundError(f"no Delta table for {table!r} at {path}")
    history = DeltaTable.forPath(spark, str(path)).history()
    rows = history.select("version", "userMetadata", "operationMetrics").collect()
    records = []
    for row in sorted(rows, key=lambda r: r.version):
        meta = _parse_metadata(row.userMetadata)
        if meta is None:
            continue
        added = [segment_from_dict(s) for s in meta.get("added", [])]
        metrics = {k: int(v) for k, v in (row.operationMetrics or {}).items() if str(v).lstrip("-").isdigit()}
        records.append(
            CommitRecord(
                version=row.version,
                added=tuple(added),
                removed=tuple(meta.get("removed", [])),
                plan_id=meta.get("plan_id"),
                op=str(meta.get("op", "load")),
                rule=meta.get("rule"),
                level=meta.get("level"),
                pool=meta.get("pool"),
                metrics=metrics,
                data_change=bool(meta.get("data_change", True)),
            )
        )
    return records


def read_catalog(spark: SparkSession, warehouse: Path | str, table: str) -> SegmentCatalog:
    """The table's segments as its Delta history records them."""
    return SegmentCatalog.from_commits({table: read_commits(spark, warehouse, table)})


def write_sub_partition(
    spark: SparkSession,
    warehouse: Path | str,
    segment: Segment,
    rows: DataFrame,
    column: str,
    literal: str,
) -> None:
    """Replace one sub-partition slice of `segment` with `rows` in ONE Delta commit.

    Adds the slice when it is empty, refreshes it otherwise: readers see the old
    rows until the commit, then the new ones. Delta checks that every written row
    belongs to the slice, and a merge of the segment committing meanwhile makes
    this write fail with a conflict instead of writing into a merged-away segment.
    """
    path = table_path(warehouse, segment.table)
    data = rows.withColumn(SEGMENT_COLUMN, F.lit(segment.id))
    predicate = f"{SEGMENT_COLUMN} = '{segment.id}' AND `{column}` = {literal}"
    writer = data.write.format("delta").option("userMetadata", _metadata("sub_partition", [segment]))
    if DeltaTable.isDeltaTable(spark, str(path)):
        writer.mode("overwrite").option("replaceWhere", predicate).save(str(path))
        return
    mismatched = data.where(~F.expr(predicate)).limit(1).count()
    if mismatched:
        raise CompactorError(f"rows for segment {segment.id} hold other values than {column} = {literal}")
    writer.mode("append").partitionBy(SEGMENT_COLUMN).save(str(path))


def _parse_metadata(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError:
        return None
    return meta if isinstance(meta, dict) and meta.get(METADATA_KEY) == 1 else None


def segment_ids_present(spark: SparkSession, warehouse: Path | str, table: str) -> dict[str, int]:
    """Row count per segment id, as the current Delta snapshot holds them."""
    df = DeltaTable.forPath(spark, str(table_path(warehouse, table))).toDF()
    return {r[SEGMENT_COLUMN]: r["count"] for r in df.groupBy(SEGMENT_COLUMN).count().collect()}


def latest_version(spark: SparkSession, warehouse: Path | str, table: str) -> int:
    row = DeltaTable.forPath(spark, str(table_path(warehouse, table))).history(1).select("version").first()
    return int(row.version) if row else -1


CONFIG_PROPERTY = "compactor.config"


def save_table_config(spark: SparkSession, warehouse: Path | str, table: str, settings_json: str) -> None:
    """Record the table's config in its Delta properties (truth lives in Delta)."""
    path = str(table_path(warehouse, table)).replace("`", "``")
    value = settings_json.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{CONFIG_PROPERTY}' = '{value}')")


def load_table_config(spark: SparkSession, warehouse: Path | str, table: str) -> str | None:
    """The config recorded by `save_table_config`, if any."""
    properties = (
        DeltaTable.forPath(spark, str(table_path(warehouse, table))).detail().select("properties").first()
    )
    return properties["properties"].get(CONFIG_PROPERTY) if properties else None


def segments_with_rows(
    spark: SparkSession, warehouse: Path | str, table: str, segment_ids: list[str], depth: int = 50
) -> set[str]:
    """Which of `segment_ids` have rows in the current snapshot.

    The recent commit files answer for most ids (see `_added_recently`); the
    rest are looked up in the snapshot's file list (partition pruning on
    `segment_id`, no data read; Spark writes no file for a partition without
    rows, so a file means rows).
    """
    path = table_path(warehouse, table)
    found = _added_recently(path, set(segment_ids), depth)
    rest = sorted(set(segment_ids) - found)
    if not rest:
        return found
    # Ask Delta rather than parse file paths: with column mapping, partition directories
    # have random names, and deletion vectors can leave a file without live rows.
    df = DeltaTable.forPath(spark, str(path)).toDF()
    rows = df.where(F.col(SEGMENT_COLUMN).isin(rest)).select(SEGMENT_COLUMN).distinct().collect()
    found |= {r[SEGMENT_COLUMN] for r in rows}
    return found & set(segment_ids)


def segment_partition_value(entry: dict[str, Any] | None) -> str | None:
    """The segment id of an `add` or `remove` action.

    Tables are partitioned by `segment_id` alone (the producer contract). Under
    column mapping the log keys partition values by the column's physical name
    (`col-<uuid>`), so the only partition value is the segment id.
    """
    values = (entry or {}).get("partitionValues") or {}
    if SEGMENT_COLUMN in values:
        return str(values[SEGMENT_COLUMN])
    return str(next(iter(values.values()))) if len(values) == 1 else None


def physical_names(spark: SparkSession, path: Path | str) -> dict[str, str]:
    """Physical -> logical column names under column mapping (empty without it)."""
    schema = json.loads(_snapshot(spark, path).metadata().schemaString())
    return {
        str(f["metadata"]["delta.columnMapping.physicalName"]): str(f["name"])
        for f in schema.get("fields", ())
        if "delta.columnMapping.physicalName" in (f.get("metadata") or {})
    }


def _added_recently(path: Path, segment_ids: set[str], depth: int) -> set[str]:
    """Ids whose partition got a non-empty file in one of the last `depth` commits, untouched since.

    A file leaves the snapshot only through a later `remove`, so an `add` with
    rows and no newer action on its partition proves the rows are there. This
    reads the commit files (milliseconds); asking the snapshot instead makes
    Delta rebuild its state after every commit (~1 s per streaming batch here).
    An id whose newest action is a `remove`, or that no recent commit touched,
    is left for the caller to look up.
    """
    found: set[str] = set()
    decided: set[str] = set()
    for _, lines in _recent_commits(path, depth):
        if decided >= segment_ids:
            break
        # id -> this commit added a file with rows for it; False (a remove, or no row count) settles
        # nothing, but older commits cannot settle it either: the caller looks it up
        touched: dict[str, bool] = {}
        for line in lines:
            action = json.loads(line)
            entry = action.get("add") or action.get("remove")
            sid = segment_partition_value(entry)
            if sid in segment_ids and sid not in decided:
                stats = json.loads(action["add"].get("stats") or "{}") if "add" in action else {}
                rows = stats.get("numRecords", 0)
                touched[sid] = touched.get(sid, False) or bool(rows)
        decided |= touched.keys()
        found |= {sid for sid, added in touched.items() if added}
    return found

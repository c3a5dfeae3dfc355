"""Reading what a table holds: its history of our commits, its segments, a plan's commit."""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from compactor.catalog.changes import CommitRecord
from compactor.catalog.fold import SegmentCatalog
from compactor.delta.commit_metadata import commit_record, parse_metadata, plan_marker
from compactor.delta.log import RECENT_COMMITS, CommitFacts, added_recently, commit_facts, find_commit
from compactor.delta.paths import SEGMENT_COLUMN, table_path
from compactor.delta.snapshot import app_version
from compactor.errors import TableNotFoundError


def table_exists(spark: SparkSession, warehouse: Path | str, table: str) -> bool:
    return DeltaTable.isDeltaTable(spark, str(table_path(warehouse, table)))


def read_commits(spark: SparkSession, warehouse: Path | str, table: str) -> list[CommitRecord]:
    """Every compactor commit of `table`, oldest first, from the Delta history."""
    path = table_path(warehouse, table)
    if not DeltaTable.isDeltaTable(spark, str(path)):
        raise TableNotFoundError(f"no Delta table for {table!r} at {path}")
    history = DeltaTable.forPath(spark, str(path)).history()
    rows = history.select("version", "userMetadata", "operationMetrics").collect()
    records = []
    for row in sorted(rows, key=lambda r: r.version):
        meta = parse_metadata(row.userMetadata)
        if meta is not None:
            records.append(commit_record(table, row.version, meta, row.operationMetrics))
    return records


def read_catalog(spark: SparkSession, warehouse: Path | str, table: str) -> SegmentCatalog:
    """The table's segments as its Delta history records them."""
    return SegmentCatalog.from_commits({table: read_commits(spark, warehouse, table)})


def segment_ids_present(spark: SparkSession, warehouse: Path | str, table: str) -> dict[str, int]:
    """Row count per segment id, as the current Delta snapshot holds them."""
    df = DeltaTable.forPath(spark, str(table_path(warehouse, table))).toDF()
    return {r[SEGMENT_COLUMN]: r["count"] for r in df.groupBy(SEGMENT_COLUMN).count().collect()}


def latest_version(spark: SparkSession, warehouse: Path | str, table: str) -> int:
    row = DeltaTable.forPath(spark, str(table_path(warehouse, table))).history(1).select("version").first()
    return int(row.version) if row else -1


def segments_with_rows(
    spark: SparkSession,
    warehouse: Path | str,
    table: str,
    segment_ids: list[str],
    depth: int = RECENT_COMMITS,
) -> set[str]:
    """Which of `segment_ids` have rows in the current snapshot.

    The recent commit files answer for most ids (see `log.added_recently`); the
    rest are asked of Delta, not parsed from file paths: with column mapping,
    partition directories have random names, and deletion vectors can leave a
    file without live rows.
    """
    path = table_path(warehouse, table)
    found = added_recently(path, set(segment_ids), depth)
    rest = sorted(set(segment_ids) - found)
    if not rest:
        return found
    df = DeltaTable.forPath(spark, str(path)).toDF()
    rows = df.where(F.col(SEGMENT_COLUMN).isin(rest)).select(SEGMENT_COLUMN).distinct().collect()
    return (found | {r[SEGMENT_COLUMN] for r in rows}) & set(segment_ids)


def committed(
    spark: SparkSession, path: Path, plan_id: str, depth: int = RECENT_COMMITS
) -> CommitFacts | None:
    """The commit of `plan_id`, however old, or None if the plan never committed.

    The recent commit files answer in milliseconds. Beyond them, the snapshot's
    `SetTransaction` for the plan's application id says whether it committed
    (Delta keeps those in checkpoints), and the history finds the version.
    """
    marker = plan_marker(plan_id)
    found = find_commit(path, marker, depth)
    if found is not None or app_version(spark, path, app_id(plan_id)) is None:
        return found
    history = DeltaTable.forPath(spark, str(path)).history()
    rows = history.where(F.col("userMetadata").contains(marker)).orderBy(F.col("version").desc()).collect()
    if rows:
        row = rows[0]
        info = {"userMetadata": row.userMetadata, "operationMetrics": row.operationMetrics}
        return commit_facts(path.name, int(row.version), info)
    # committed, but the log cleanup removed the commit's metadata: its version is unknown
    return CommitFacts(version=-1, records=0, bytes=0)


def app_id(plan_id: str) -> str:
    """The Delta application id a plan's commit carries (`txnAppId`), making it idempotent."""
    return f"compactor-plan-{plan_id}"

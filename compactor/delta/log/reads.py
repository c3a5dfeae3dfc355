"""Reading what a table holds: its history of our commits, its segments, a plan's commit."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.catalog.changes import CommitRecord
from compactor.catalog.fold import SegmentCatalog
from compactor.delta.files import HadoopFiles, jvm_class, scala_none
from compactor.delta.log.commit_metadata import commit_record, parse_metadata, plan_marker
from compactor.delta.log.reader import RECENT_COMMITS, CommitFacts, DeltaLogReader, commit_facts
from compactor.delta.log.rust_reads import file_totals
from compactor.delta.log.snapshot import snapshot_files
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.domain.segments import RowCount
from compactor.errors import TableNotFoundError


def table_exists(
    spark: SparkSession, warehouse: Path | str, table: str, files: HadoopFiles | None = None
) -> bool:
    """Whether `table` is a Delta table now: its log holds a commit. Asked of the log's files
    each time, never of the `DeltaLog` Spark keeps per path: `DeltaTable.isDeltaTable` answers
    from that cached state, so a table asked about while it was being born (its `_delta_log/`
    made, no commit in it yet) stayed "no table" in this session after another process
    committed to it, until something else loaded its snapshot (issue 49: every later event of
    the table was dead-lettered as `unknown_table`). `files`: the caller's, when it keeps one."""
    files = files or HadoopFiles(spark)
    log = f"{table_uri(warehouse, table)}/_delta_log"
    if has_commit(files, log):
        return True
    # neither file: no log at all, a log being born, or (rarely) one whose cleanup removed
    # version 0 and that keeps no _last_checkpoint hint: Delta lists that one afresh
    return files.exists(log) and _listed_version(spark, table_uri(warehouse, table)) >= 0


def has_commit(files: HadoopFiles, log: str) -> bool:
    """Does the `_delta_log` folder `log` hold version 0, or (after log cleanup removed it) the
    checkpoint hint that replaced it? Two file lookups at most, no Spark job, no Delta state."""
    return files.exists(f"{log}/{0:020d}.json") or files.exists(f"{log}/_last_checkpoint")


def _listed_version(spark: SparkSession, path: str) -> int:
    """The table's newest version as Delta finds it by listing its log now (-1: no commit);
    this also brings Spark's cached `DeltaLog` of the path up to date."""
    jvm: Any = spark._jvm
    delta_log = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)
    return int(delta_log.update(False, scala_none(jvm), scala_none(jvm)).version())


def read_commits(spark: SparkSession, warehouse: Path | str, table: str) -> list[CommitRecord]:
    """Every compactor commit of `table`, oldest first, from the Delta history."""
    path = table_uri(warehouse, table)
    if not table_exists(spark, warehouse, table):
        raise TableNotFoundError(f"no Delta table for {table!r} at {path}")
    history = DeltaTable.forPath(spark, path).history()
    # epoch seconds: a timestamp column would come back in the Python process's local zone
    rows = history.selectExpr(
        "version", "cast(timestamp as double) as at", "userMetadata", "operationMetrics"
    ).collect()
    records = []
    for row in sorted(rows, key=lambda r: r.version):
        meta = parse_metadata(row.userMetadata)
        if meta is not None:
            records.append(
                commit_record(
                    table, row.version, meta, row.operationMetrics, datetime.fromtimestamp(row.at, UTC)
                )
            )
    return records


def read_catalog(spark: SparkSession, warehouse: Path | str, table: str) -> SegmentCatalog:
    """The table's segments as its Delta history records them."""
    return SegmentCatalog.from_commits({table: read_commits(spark, warehouse, table)})


def segment_rows(
    spark: SparkSession, warehouse: Path | str, table: str, files: HadoopFiles | None = None
) -> dict[str, RowCount]:
    """Rows per segment id, from the snapshot's file list: each file's row count (from its
    statistics) less the rows its deletion vector hides, those hidden, and the files' bytes.
    No data file is read. `files`: the caller's, when it keeps one."""
    return {sid: RowCount(*totals) for sid, totals in _file_totals(spark, warehouse, table, files).items()}


def segment_sizes(spark: SparkSession, warehouse: Path | str, table: str) -> dict[str, tuple[int, int]]:
    """(visible rows, bytes) per segment id with rows, from the snapshot's file list (rows -1
    when a file has no statistics)."""
    return {sid: (visible, size) for sid, (visible, _, size) in _file_totals(spark, warehouse, table).items()}


def _file_totals(
    spark: SparkSession, warehouse: Path | str, table: str, files: HadoopFiles | None = None
) -> dict[str, tuple[int, int, int]]:
    """(visible rows, rows deletion vectors hide, bytes) per segment id with visible rows: from
    delta-rs where it can read the table (`rust_reads`), else from Spark's snapshot."""
    uri = table_uri(warehouse, table)
    local = (files or HadoopFiles(spark)).local_path(uri)
    found = None if local is None else file_totals(local, SEGMENT_COLUMN)
    if found is not None:
        return found
    DeltaTable.forPath(spark, uri)  # loads the newest snapshot
    added = DataFrame(snapshot_files(spark, uri), spark)
    rows = (
        added.select(
            F.map_values("partitionValues")[0].alias("sid"),  # partitioned by segment_id alone
            F.get_json_object("stats", "$.numRecords").cast("long").alias("n"),
            F.coalesce(F.col("deletionVector.cardinality"), F.lit(0)).alias("hidden"),
            F.col("size"),
        )
        .groupBy("sid")
        .agg(
            F.sum(F.col("n") - F.col("hidden")).alias("rows"),
            F.sum("hidden").alias("hidden"),
            F.sum("size").alias("bytes"),
        )
        .collect()
    )
    return {
        r.sid: (int(r.rows) if r.rows is not None else -1, int(r.hidden), int(r.bytes))
        for r in rows
        if r.rows is None or r.rows > 0
    }


def latest_version(spark: SparkSession, warehouse: Path | str, table: str) -> int:
    row = DeltaTable.forPath(spark, table_uri(warehouse, table)).history(1).select("version").first()
    return int(row.version) if row else -1


def segments_with_rows(
    spark: SparkSession, log: DeltaLogReader, segment_ids: list[str], depth: int = RECENT_COMMITS
) -> set[str]:
    """Which of `segment_ids` have rows in the current snapshot.

    The recent commits answer for most ids (see `DeltaLogReader.added_recently`);
    the rest are asked of Delta, not parsed from file paths: with column mapping,
    partition directories have random names, and deletion vectors can leave a
    file without live rows.
    """
    found = log.added_recently(set(segment_ids), depth)
    rest = sorted(set(segment_ids) - found)
    if not rest:
        return found
    df = DeltaTable.forPath(spark, log.table_uri).toDF()
    rows = df.where(F.col(SEGMENT_COLUMN).isin(rest)).select(SEGMENT_COLUMN).distinct().collect()
    return (found | {r[SEGMENT_COLUMN] for r in rows}) & set(segment_ids)


def committed(
    spark: SparkSession, log: DeltaLogReader, plan_id: str, depth: int = RECENT_COMMITS
) -> CommitFacts | None:
    """The commit of `plan_id`, found by the plan id in the commits' metadata, or None when the
    log holds no commit of it.

    Asked only once a plan's inputs are gone, to tell the plan's own commit from someone
    else's removal. The recent commits answer in milliseconds; beyond them, Delta's history
    (the commit files the log still holds, no state rebuild). A commit older than the log's
    retention is not found: the plan is then stale, and the catalog, which folded that commit
    long ago, re-plans without it.
    """
    marker = plan_marker(plan_id)
    found = log.find(marker, depth)
    if found is not None:
        return found
    history = DeltaTable.forPath(spark, log.table_uri).history()
    rows = history.where(F.col("userMetadata").contains(marker)).orderBy(F.col("version").desc()).collect()
    if not rows:
        return None
    row = rows[0]
    info = {"userMetadata": row.userMetadata, "operationMetrics": row.operationMetrics}
    return commit_facts(log.table, int(row.version), info)

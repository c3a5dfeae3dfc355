"""The durable catalog as a Delta table in the warehouse: `<warehouse>/_compactor/catalog`.

One row per segment per table, appended as things change and folded latest-wins
on read. The `current` partition holds live segments, tombstones of segments
that left, and one mark row per table (the data-table version the facts are
complete to, the announced version, the filter of retired ids); start-up reads
only it, and it is rewritten to its live rows whenever tombstones outnumber
them. The `retired` partition keeps what is left of every merged-away segment
for good, read by id only.

A save writes what changed as one small file of rows in a journal beside the
table (`<warehouse>/_compactor/catalog-journal/<seq>.json`, through Hadoop's
file systems: one write, no Spark job), and every `COMPACT_EVERY` saves, or
`COMPACT_AFTER_S` after the oldest, the journal is appended to the table in one
Delta commit and its files deleted, on a thread of its own while saves go on (a
journal left by a previous run is folded with the next of those, not at
start-up). Every save is durable the moment it returns;
readers fold the journal over the table (rows carry a sequence number, so a row
in both after a crash between the append and the deletes folds once).

Jobs that share a warehouse in shards share the table: each reads the rows of the
tables it owns, keeps its journal in a folder of its own
(`catalog-journal/<shard>-of-<n>/`) and appends blindly, which Delta never
refuses for a concurrent append; only the occasional rewrite of a shard's current
rows can lose a race, and it is then left for a later start.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random

from compactor.catalog.failures import Failure
from compactor.catalog.retired import RetiredFilter, RetiredSegment
from compactor.catalog.store import CatalogChanges, StoredCatalog, StoreScope, TableMark
from compactor.delta.files import HadoopFiles
from compactor.delta.log.reads import has_commit
from compactor.delta.log.rust_reads import partition_rows
from compactor.delta.paths import state_uri
from compactor.delta.predicates import in_list
from compactor.domain.segment_json import segment_from_dict, segment_to_dict
from compactor.domain.segments import Segment, TimeRange

log = logging.getLogger(__name__)

CURRENT, RETIRED = "current", "retired"
MARK = ""  # the segment id of a table's mark row
REWRITE_SLACK = 1000  # rows beyond twice the live ones before the current part is rewritten
JOURNAL = "catalog-journal"
COMPACT_EVERY = 64  # journal files folded into the table at once
UPKEEP_EVERY_S = 6 * 3600.0  # the table's small files bin-packed and its old ones vacuumed this often
COMPACT_AFTER_S = 300.0  # ... or this long after the oldest was written
COMPACT_RETRY_S = 30.0  # after a fold that failed
SCHEMA = StructType(
    [
        StructField("part", StringType(), False),
        StructField("table", StringType(), False),
        StructField("segment_id", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("live", BooleanType(), True),
        StructField("segment", StringType(), True),  # the segment's fields as JSON (live rows)
        StructField("start", TimestampType(), True),  # retired rows: what is kept
        StructField("end", TimestampType(), True),
        StructField("records", LongType(), True),
        StructField("fingerprint", StringType(), True),
        StructField("retired_by", StringType(), True),
        StructField("version", LongType(), True),  # mark rows
        StructField("announced", LongType(), True),
        StructField("retired_filter", BinaryType(), True),
        StructField("config", StringType(), True),
    ]
)


class DeltaCatalogStore:
    """`CatalogStore` on a Delta table beside the data tables (same storage, same transactions),
    with a journal of recent saves. One job writes it (`writer`), or one per shard (`scope`);
    others (`compactor status`) only read every shard's part, and leave the journals and the
    table as they find them."""

    def __init__(
        self,
        spark: SparkSession,
        warehouse: Path | str,
        writer: bool = True,
        scope: StoreScope | None = None,
    ) -> None:
        self.spark = spark
        self.uri = state_uri(warehouse, "catalog")
        self.journals_uri = state_uri(warehouse, JOURNAL)
        self.journal_uri = self.journals_uri + (f"/{scope.name}" if scope is not None else "")
        self.writer = writer
        self.scope = scope
        self.files = HadoopFiles(spark)
        self._seq = 0
        self._journal: list[Row] = []  # rows saved since the journal was last folded into the table
        self._journal_files: list[str] = []
        self._journal_since = 0.0  # when its oldest file was written (monotonic seconds)
        self._lock = threading.Lock()  # the journal lists: saves and a fold running aside
        self._compacting: threading.Thread | None = None
        self._retry_at = 0.0  # after a failed fold, none before this (monotonic seconds)
        self._upkeep_at = time.monotonic() + UPKEEP_EVERY_S  # not in a fresh job's first hours

    def _exists(self) -> bool:
        # its log's files, never Delta's cached answer for the path (see reads.table_exists)
        return has_commit(self.files, f"{self.uri}/_delta_log")

    def load(self) -> StoredCatalog:
        # what a previous run left in the journal stays there, folded in with the next save's
        # compaction: a Spark write at start-up would hold the first batch back by seconds
        self._read_journal()
        journal = [r for r in self._journal if r.part == CURRENT]
        if self._exists():
            journal = [*self._current_rows(), *journal]
        return self._fold([r for r in journal if self._owns(r.table)])

    def _current_rows(self) -> list[Any]:
        """The table's current part; without a Spark query where delta-rs can read it (spares
        start-up Spark's first, cold query: about 5 of a restart's 14 s)."""
        local = self.files.local_path(self.uri)
        found = None if local is None else partition_rows(local, "part", CURRENT)
        if found is not None:
            return found
        return self.spark.read.format("delta").load(self.uri).where(F.col("part") == CURRENT).collect()

    def _owns(self, table: str) -> bool:
        return self.scope is None or self.scope.owns(table)

    def _fold(self, rows: list[Row]) -> StoredCatalog:
        latest: dict[tuple[str, str], Any] = {}
        for row in rows:
            key = (row.table, row.segment_id)
            if key not in latest or row.seq > latest[key].seq:
                latest[key] = row
            self._seq = max(self._seq, row.seq)
        segments: dict[str, list[Segment]] = {}
        marks: dict[str, TableMark] = {}
        for (table, sid), row in latest.items():
            if sid == MARK:
                marks[table] = TableMark(
                    row.version,
                    row.announced,
                    RetiredFilter.from_bytes(row.retired_filter),
                    row.config,
                    merging=row.live is not False,  # a mark row's `live` is its merging switch
                    **_mark_extras(row.segment),
                )
            elif row.live:
                segments.setdefault(table, []).append(segment_from_dict(json.loads(row.segment)))
        live = sum(len(s) for s in segments.values()) + len(marks)
        if self.writer and len(rows) > 2 * live + REWRITE_SLACK:
            self.compact()  # the journal's rows in the table first: the rewrite replaces them all
            self._rewrite(segments, marks)
        return StoredCatalog(segments, marks)

    def save(self, changes: CatalogChanges) -> None:
        if not changes:
            return
        self._seq += 1
        rows = [self._live_row(table, sid, segment) for (table, sid), segment in changes.live.items()]
        rows += [self._retired_row(r) for r in changes.retired]
        rows += [self._mark_row(table, mark) for table, mark in changes.marks.items()]
        name = f"{self.journal_uri}/{self._seq:020d}.json"
        self.files.write_text(name, "\n".join(json.dumps(_row_json(r)) for r in rows))
        with self._lock:
            if not self._journal_files:
                self._journal_since = time.monotonic()
            self._journal += rows
            self._journal_files.append(name)
            due = (
                len(self._journal_files) >= COMPACT_EVERY
                or time.monotonic() - self._journal_since >= COMPACT_AFTER_S
            )
        if due:
            self._compact_aside()

    def _compact_aside(self) -> None:
        """Fold the journal into the table on a thread of its own: the Delta append takes about
        a second, which no batch should wait for (its rows are durable in the journal already)."""
        if self._compacting is not None and self._compacting.is_alive():
            return
        if time.monotonic() < self._retry_at:
            return
        self._compacting = threading.Thread(
            target=self._compact_logged, name="catalog-compaction", daemon=True
        )
        self._compacting.start()

    def _compact_logged(self) -> None:
        try:
            self._fold_journal()
        except Exception:  # the journal stays as it is: the next save past the retry time tries again
            self._retry_at = time.monotonic() + COMPACT_RETRY_S
            log.warning("catalog: folding the journal into the table failed; retried later", exc_info=True)

    def compact(self) -> None:
        """Fold the journal into the table now (after a fold running aside, if one is)."""
        self._wait_for_fold()
        self._fold_journal()

    def _wait_for_fold(self) -> None:
        if self._compacting is not None:
            self._compacting.join()

    def _fold_journal(self) -> None:
        """One Delta append of the journal's rows, then its files deleted (a crash between the
        two leaves rows in both, which fold latest-wins as before). Saves may go on meanwhile."""
        with self._lock:
            rows, files = list(self._journal), list(self._journal_files)
        if not rows:
            return
        self._append(rows)
        for name in files:
            self.files.delete(name)
        with self._lock:
            del self._journal[: len(rows)]
            del self._journal_files[: len(files)]
            self._journal_since = time.monotonic()  # the files left were written since it began

    def upkeep(self, force: bool = False) -> None:
        """Every `UPKEEP_EVERY_S` (or now, `force`): the table's small appended files bin-packed
        (Delta's OPTIMIZE; its commits stay blind to the jobs' appends) and the files older
        versions no longer need removed (VACUUM, within the table's own retention, 7 days by
        default): its file count and bytes stay bounded by its live rows, not by its history.
        Its log is checkpointed by its own commits (none of them a merge's). Losing a race with a
        rewrite of another shard's rows leaves it for the next time."""
        if not self.writer or (not force and time.monotonic() < self._upkeep_at):
            return
        self._upkeep_at = time.monotonic() + UPKEEP_EVERY_S
        if not self._exists():
            return
        table = DeltaTable.forPath(self.spark, self.uri)
        try:
            table.optimize().executeCompaction()
            table.vacuum()
        except Exception as exc:
            if not _lost_race(exc):
                raise
            log.info("catalog: its upkeep lost a race with another job; left for next time")
            return
        log.info("catalog: its table's files compacted and vacuumed")

    def fold_journals(self) -> None:
        """Every shard's journal folded into the table (a reshard, with every job stopped)."""
        self._read_journal(every=True)
        self.compact()

    def _read_journal(self, every: bool = False) -> None:
        """This store's journal; a reader's is every shard's (their folders under the root)."""
        self._wait_for_fold()
        folders = [self.journal_uri]
        if every or (not self.writer and self.scope is None):
            names = self.files.list_names(self.journals_uri)
            folders += [f"{self.journals_uri}/{n}" for n in sorted(names) if not n.endswith(".json")]
        self._journal_files, self._journal = [], []
        for folder in folders:
            names = sorted(n for n in self.files.list_names(folder) if n.endswith(".json"))
            self._journal_files += [f"{folder}/{n}" for n in names]
            self._seq = max([self._seq, *(int(n.removesuffix(".json")) for n in names)])
        self._journal = [
            _row_from_json(json.loads(line))
            for uri in self._journal_files
            for line in (self.files.read_text(uri) or "").splitlines()
            if line.strip()
        ]
        self._journal_since = time.monotonic()

    def retired(self, table: str, segment_ids: Sequence[str]) -> dict[str, RetiredSegment]:
        if not segment_ids:
            return {}
        found: dict[str, Any] = {}
        for row in self._retired_rows(table, "segment_id", segment_ids):
            if row.segment_id not in found or row.seq > found[row.segment_id].seq:
                found[row.segment_id] = row
        return {
            sid: RetiredSegment(
                table, sid, TimeRange(_utc(r.start), _utc(r.end)), r.records, r.fingerprint, r.retired_by
            )
            for sid, r in found.items()
        }

    def merged_by(self, table: str, plan_ids: Sequence[str]) -> dict[str, set[str]]:
        if not plan_ids:
            return {}
        found: dict[str, set[str]] = {}
        for row in self._retired_rows(table, "retired_by", plan_ids):
            found.setdefault(row.retired_by, set()).add(row.segment_id)
        return found

    def _retired_rows(self, table: str, column: str, values: Sequence[str]) -> list[Any]:
        """The table's retired rows whose `column` holds one of `values`: the journal's and the
        catalog table's (a row in both, after a crash mid-fold, comes back twice)."""
        wanted = set(values)
        with self._lock:  # the journal before the table: a fold running aside appends, then drops
            journal = list(self._journal)
        rows = [r for r in journal if r.part == RETIRED and r.table == table and getattr(r, column) in wanted]
        if self._exists():
            df = self.spark.read.format("delta").load(self.uri)
            rows += df.where(
                (F.col("part") == RETIRED)
                & (F.col("table") == table)
                & F.expr(f"{column} IN ({in_list(values)})")
            ).collect()
        return rows

    @retry(
        retry=retry_if_exception(lambda exc: _lost_race(exc)),
        stop=stop_after_attempt(5),
        wait=wait_random(0.1, 1.0),
        reraise=True,
    )
    def _append(self, rows: list[Row]) -> None:
        """One blind append (jobs in shards append side by side; only two that create the
        table at once race, and the loser appends again)."""
        df = self.spark.createDataFrame(rows, SCHEMA)
        writer = df.write.format("delta").mode("append").option("userMetadata", "compactor catalog")
        if not self._exists():
            writer = writer.partitionBy("part")
        writer.save(self.uri)

    def _rewrite(self, segments: dict[str, list[Segment]], marks: dict[str, TableMark]) -> None:
        """The current partition replaced by its live rows: start-up stays proportional to them."""
        self._seq += 1
        rows = [self._live_row(t, s.id, s) for t, members in segments.items() for s in members]
        rows += [self._mark_row(t, m) for t, m in marks.items()]
        df = self.spark.createDataFrame(rows, SCHEMA)
        where = f"part = '{CURRENT}'"
        if self.scope is not None:  # this shard's rows only; other jobs may append meanwhile
            where += f" AND `table` IN ({in_list(sorted({*segments, *marks}))})" if rows else " AND false"
        try:
            df.write.format("delta").mode("overwrite").option("replaceWhere", where).save(self.uri)
        except Exception as exc:
            if not _lost_race(exc):
                raise
            log.info(
                "catalog: the rewrite of %s's rows lost a race with another job; left for later", self.scope
            )
            return
        log.info("catalog: current partition rewritten to %d row(s)", len(rows))

    def _row(self, part: str, table: str, segment_id: str, **values: Any) -> Row:
        fields = dict.fromkeys(SCHEMA.fieldNames()) | {"part": part, "table": table, "segment_id": segment_id}
        return Row(**(fields | {"seq": self._seq} | values))

    def _live_row(self, table: str, segment_id: str, segment: Segment | None) -> Row:
        text = json.dumps(segment_to_dict(segment)) if segment is not None else None
        return self._row(CURRENT, table, segment_id, live=segment is not None, segment=text)

    def _retired_row(self, r: RetiredSegment) -> Row:
        return self._row(
            RETIRED,
            r.table,
            r.segment_id,
            live=False,
            start=r.range.start,
            end=r.range.end,
            records=r.records,
            fingerprint=r.fingerprint,
            retired_by=r.retired_by,
        )

    def _mark_row(self, table: str, mark: TableMark) -> Row:
        return self._row(
            CURRENT,
            table,
            MARK,
            live=mark.merging,
            version=mark.version,
            announced=mark.announced,
            retired_filter=bytearray(mark.retired.to_bytes()),
            config=mark.config,
            # a mark row's `segment` holds its failures, debt outlook, quarantine and unannounced
            # merges: no column added to existing catalogs
            segment=json.dumps(
                {
                    "failures": [f.to_dict() for f in mark.failures],
                    "debt": json.loads(mark.debt) if mark.debt else None,
                    "quarantine": mark.quarantine,
                    "unannounced": list(mark.unannounced),
                }
            ),
        )


def _lost_race(exc: BaseException) -> bool:
    """Delta refused a commit because another job committed first (py4j wraps the exception)."""
    text = f"{type(exc).__name__} {exc}"
    return any(
        name in text
        for name in (
            "ConcurrentAppend",
            "ConcurrentDelete",
            "ProtocolChanged",
            "MetadataChanged",
            "FileAlreadyExists",
            "ConcurrentWrite",
        )
    )


def _mark_extras(text: str | None) -> dict[str, Any]:
    """A mark row's failures, debt outlook, quarantine and unannounced merges (a bare list:
    failures, as first stored)."""
    doc = json.loads(text or "[]")
    if isinstance(doc, list):
        doc = {"failures": doc}
    debt = doc.get("debt")
    return {
        "failures": tuple(Failure.from_dict(f) for f in doc.get("failures") or ()),
        "debt": json.dumps(debt, sort_keys=True) if debt is not None else None,
        "quarantine": doc.get("quarantine"),
        "unannounced": tuple(doc.get("unannounced") or ()),
    }


def _row_json(row: Row) -> dict[str, Any]:
    """A row as a journal line: times in ISO 8601, the filter's bytes in base64."""
    doc = row.asDict()
    for key in ("start", "end"):
        if doc[key] is not None:
            doc[key] = doc[key].isoformat()
    if doc["retired_filter"] is not None:
        doc["retired_filter"] = base64.b64encode(bytes(doc["retired_filter"])).decode()
    return doc


def _row_from_json(doc: dict[str, Any]) -> Row:
    for key in ("start", "end"):
        if doc.get(key) is not None:
            doc[key] = datetime.fromisoformat(doc[key])
    if doc.get("retired_filter") is not None:
        doc["retired_filter"] = bytearray(base64.b64decode(doc["retired_filter"]))
    fields = dict.fromkeys(SCHEMA.fieldNames())
    return Row(**(fields | {k: v for k, v in doc.items() if k in fields}))


def _utc(value: datetime) -> datetime:
    """Spark hands timestamps back as naive local times."""
    return value.astimezone(UTC) if value.tzinfo is None else value

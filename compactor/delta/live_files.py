"""The files live in a table, by segment, kept current from its log: what a direct commit removes.

A merge replaces its inputs' files. Delta's generic overwrite finds them by rebuilding the
table's whole state (every file of every version) and filtering it, on every merge. The job
reads every commit of its tables anyway, so it keeps each table's live `add` actions itself:
read once from the newest checkpoint and the commits after it (no Spark job: the checkpoint's
Parquet is read in the driver), then folded forward commit by commit. At a transaction's read
version, folding the few commits since the last fold says exactly which input files are live.

Reconciliation follows the Delta protocol: a file is its path; within one commit a `remove`
and an `add` of the same path (a deletion vector replaced) leave the `add`; a commit may add a
file the table already holds (its metadata updated, as a promotion does) and the new entry
replaces the old.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from compactor.delta.files import HadoopFiles
from compactor.delta.log import Actions, DeltaLogReader, segment_partition_value
from compactor.errors import LogGap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A per-plan application id the job wrote before it committed directly (one per merge, kept by
# Delta until the table's `delta.setTransactionRetentionDuration` expires them).
LEGACY_PLAN_APP_PREFIX = "compactor-plan-"


class CheckpointUnreadable(Exception):
    """The checkpoint is not one the driver reads (a V2 checkpoint with sidecars, a missing
    part): the caller asks Delta for the table's files instead."""


@dataclass(frozen=True, slots=True)
class LiveFile:
    """One live data file: its path as the log writes it, its segment, size and rows, and its
    `add` action as JSON (what Delta parses back into the action a commit removes)."""

    path: str
    segment: str
    size: int
    records: int | None  # from the file's statistics; None without them
    hidden: int  # rows its deletion vector hides
    action: str
    vector: bool = False  # does it carry a deletion vector?

    @property
    def visible(self) -> int | None:
        return None if self.records is None else self.records - self.hidden

    @classmethod
    def of(cls, add: dict[str, Any]) -> LiveFile | None:
        """The file an `add` action names (None for a file outside any segment)."""
        segment = segment_partition_value(add)
        if segment is None:
            return None
        stats = _stats(add)
        dv = add.get("deletionVector") or {}
        return cls(
            path=str(add["path"]),
            segment=segment,
            size=int(add.get("size") or 0),
            records=int(stats["numRecords"]) if "numRecords" in stats else None,
            hidden=int(dv.get("cardinality") or 0),
            action=json.dumps({"add": add}, separators=(",", ":")),
            vector=bool(dv),
        )


def _stats(add: dict[str, Any]) -> dict[str, Any]:
    try:
        return dict(json.loads(add.get("stats") or "{}"))
    except (TypeError, ValueError):
        return {}


def path_key(path: str, table_uri: str) -> str:
    """The identity of a file across actions: relative to the table, URI-decoded (as Delta
    canonicalises paths before it reconciles them)."""
    relative = path[len(table_uri) + 1 :] if path.startswith(table_uri + "/") else path
    return unquote(relative)


class LiveFiles:
    """A table's live files at `version`, by segment; not thread-safe (`LiveFileIndex` locks)."""

    def __init__(self, table_uri: str, version: int) -> None:
        self.table_uri = table_uri.rstrip("/")
        self.version = version
        self._by_path: dict[str, LiveFile] = {}
        self._by_segment: dict[str, dict[str, LiveFile]] = {}
        self.legacy_app_ids: set[str] = set()
        # the rest of the table's state, as far as a checksum of it needs
        self.protocol: dict[str, Any] | None = None
        self.metadata: dict[str, Any] | None = None
        self.txns: dict[str, dict[str, Any]] = {}
        self.domain_metadata = False  # did any commit carry domain metadata (not kept here)?

    def add(self, add: dict[str, Any]) -> None:
        found = LiveFile.of(add)
        key = path_key(str(add["path"]), self.table_uri)
        self._drop(key)
        if found is not None:
            self._by_path[key] = found
            self._by_segment.setdefault(found.segment, {})[key] = found

    def remove(self, path: str) -> None:
        self._drop(path_key(path, self.table_uri))

    def _drop(self, key: str) -> None:
        old = self._by_path.pop(key, None)
        if old is not None:
            files = self._by_segment[old.segment]
            del files[key]
            if not files:
                del self._by_segment[old.segment]

    def note(self, action: dict[str, Any]) -> None:
        """A non-file action: the newest protocol and metadata, each application's transaction."""
        if "txn" in action:
            txn = action["txn"]
            app = str(txn.get("appId") or "")
            self.txns[app] = txn
            if app.startswith(LEGACY_PLAN_APP_PREFIX):
                self.legacy_app_ids.add(app)
        elif "protocol" in action:
            self.protocol = action["protocol"]
        elif "metaData" in action:
            self.metadata = action["metaData"]
        elif "domainMetadata" in action:
            self.domain_metadata = True

    def fold(self, version: int, actions: Actions) -> None:
        """One commit, in the protocol's order: its removes, then its adds."""
        if version != self.version + 1:
            raise ValueError(f"{self.table_uri}: fold of version {version} after {self.version}")
        for action in actions:
            if "remove" in action:
                self.remove(str(action["remove"]["path"]))
            elif "add" not in action:
                self.note(action)
        for action in actions:
            if "add" in action:
                self.add(action["add"])
        self.version = version

    def of(self, segment_ids: Collection[str]) -> dict[str, list[LiveFile]]:
        """The live files of those segments that have any, by segment."""
        return {s: list(self._by_segment[s].values()) for s in segment_ids if s in self._by_segment}

    def segments(self) -> set[str]:
        return set(self._by_segment)

    def everything(self) -> list[LiveFile]:
        return list(self._by_path.values())


def table_live_files(spark: SparkSession, path: str, table: str) -> LiveFileIndex:
    """A table's live files read afresh, with a log reader of their own (a job keeps one per
    table instead: `SparkTableStore.live_files`)."""
    files = HadoopFiles(spark)
    return LiveFileIndex(DeltaLogReader(files, path, table), files)


class LiveFileIndex:
    """One table's live files, loaded on first use and kept current from its log reader.

    Merges of one table run on several threads: each catch-up happens under the index's lock.
    """

    def __init__(self, log_reader: DeltaLogReader, files: HadoopFiles) -> None:
        self.log = log_reader
        self.files = files
        self._live: LiveFiles | None = None
        self._lock = threading.Lock()

    def at(self, version: int) -> LiveFiles:
        """The live files at `version` (the newest version or later than the last fold): the
        commits since the last fold are folded in. `LogGap` when the log no longer holds them
        (the caller loads again); `CheckpointUnreadable` when the checkpoint cannot be read."""
        with self._lock:
            live = self._live
            if live is None or live.version > version:
                live = self._live = load_live_files(self.log, self.files, version)
            try:
                for v in range(live.version + 1, version + 1):
                    actions = self.log.commit(v)
                    if actions is None:
                        raise LogGap(f"{self.log.log_uri}: commit {v} is no longer in the log")
                    live.fold(v, actions)
            except LogGap:
                live = self._live = load_live_files(self.log, self.files, version)
            return live

    def legacy_app_ids(self) -> int:
        """Per-plan transaction ids the table carried when last folded (0 before the first use)."""
        with self._lock:
            return 0 if self._live is None else len(self._live.legacy_app_ids)

    def forget(self) -> None:
        """Load again at the next use (after a commit this index cannot follow)."""
        with self._lock:
            self._live = None


def load_live_files(reader: DeltaLogReader, files: HadoopFiles, version: int) -> LiveFiles:
    """The live files at `version`: the newest checkpoint at or before it, then its commits."""
    checkpoint = _last_checkpoint(reader, files)
    start = -1 if checkpoint is None or checkpoint["version"] > version else int(checkpoint["version"])
    live = LiveFiles(reader.table_uri, start)
    if start >= 0:
        assert checkpoint is not None
        for entry in _checkpoint_actions(reader, files, checkpoint):
            if "add" in entry:
                live.add(entry["add"])
            else:
                live.note(entry)
    for v in range(start + 1, version + 1):
        actions = reader.commit(v)
        if actions is None:
            raise CheckpointUnreadable(f"{reader.log_uri}: commit {v} is gone and no checkpoint covers it")
        live.fold(v, actions)
    return live


def _last_checkpoint(reader: DeltaLogReader, files: HadoopFiles) -> dict[str, Any] | None:
    text = files.read_text(f"{reader.log_uri}/_last_checkpoint")
    if not text:
        return None
    found: dict[str, Any] = json.loads(text)
    if "v2Checkpoint" in found:
        raise CheckpointUnreadable(f"{reader.log_uri}: a V2 checkpoint (sidecars) is not read by the job")
    return found


def _checkpoint_actions(
    reader: DeltaLogReader, files: HadoopFiles, checkpoint: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """The checkpoint's entries but its tombstones, as the commit files write them."""
    import pyarrow.parquet as pq

    version, parts = int(checkpoint["version"]), checkpoint.get("parts")
    names = (
        [f"{version:020d}.checkpoint.parquet"]
        if not parts
        else [
            f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet" for i in range(1, int(parts) + 1)
        ]
    )
    for name in names:
        data = files.read_bytes(f"{reader.log_uri}/{name}")
        if data is None:
            raise CheckpointUnreadable(f"{reader.log_uri}: checkpoint file {name} is missing")
        schema = pq.read_schema(io.BytesIO(data))
        columns = [c for c in ("add", "txn", "protocol", "metaData", "domainMetadata") if c in schema.names]
        table = pq.read_table(io.BytesIO(data), columns=columns)
        for column in columns:
            for value in table.column(column).to_pylist():
                if value is not None:
                    yield {column: _as_json_action(value)}


_MAPS = frozenset({"partitionValues", "tags", "configuration", "options"})  # maps in the log's schema


def _as_json_action(value: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's struct as the commit files write the action: maps as objects, unset
    fields left out, parsed copies (`*_parsed`) dropped (statistics kept as their JSON text)."""
    out = _plain(value)
    if "stats" not in out and isinstance(value.get("stats_parsed"), dict):
        records = value["stats_parsed"].get("numRecords")
        if records is not None:
            out["stats"] = json.dumps({"numRecords": records})
    return out


def _plain(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, field in value.items():
        if field is None or key.endswith("_parsed"):
            continue
        if key in _MAPS and isinstance(field, list):  # Arrow reads a map as (key, value) pairs
            field = dict(field)
        elif isinstance(field, dict):
            field = _plain(field)
        out[key] = field
    return out

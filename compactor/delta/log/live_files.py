"""The files live in a table, by segment, kept current from its log: what a direct commit removes.

A merge replaces its inputs' files. Delta's generic overwrite finds them by rebuilding the
table's whole state (every file of every version) and filtering it, on every merge. The job
reads every commit of its tables anyway, so it keeps each table's live `add` actions itself:
read once from the newest checkpoint and the commits after it (no Spark job: the checkpoint is
read in the driver), then folded forward commit by commit. At a transaction's read version,
folding the few commits since the last fold says exactly which input files are live.

Every checkpoint form of Delta's protocol (PROTOCOL.md, "Checkpoints") is read: a classic
`<v>.checkpoint.parquet`, a multi-part `<v>.checkpoint.<i>.<n>.parquet`, and a V2 checkpoint
(tables with the `v2Checkpoint` feature, `delta.checkpointPolicy = v2`), UUID-named
`<v>.checkpoint.<uuid>.json|parquet` or classic-named, whose `sidecar` actions name Parquet
files under `_delta_log/_sidecars/` holding its `add` and `remove` actions. `_last_checkpoint`
is a hint: when it is missing, names a checkpoint that cannot be read (a missing part or
sidecar) or is newer than the version asked for, the log's listing is searched for the newest
complete checkpoint, and the commits from version 0 serve when there is none. A checkpoint
the job cannot read at all (an unknown form, its commits before it cleaned up) leaves the
table's files to Delta's own snapshot (`delta_live_files`): one state rebuild per load, named
once in the log, and in `compactor status`.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from compactor.delta.files import HadoopFiles, jvm_class, scala_none
from compactor.delta.log.reader import (
    Actions,
    DeltaLogReader,
    checkpoint_name,
    listed_names,
    segment_partition_value,
)
from compactor.errors import LogGap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# A per-plan application id the job wrote before it committed directly (one per merge, kept by
# Delta until the table's `delta.setTransactionRetentionDuration` expires them).
LEGACY_PLAN_APP_PREFIX = "compactor-plan-"
# Delta lists a table's transactions in its checksum only while they are this few
# (setTransactionsInCrc); past it a job needs none of them, and a loader that leaves one per
# load (without a retention) would otherwise grow the driver's memory with every load
TXNS_KEPT = 100


class CheckpointUnreadable(Exception):
    """No checkpoint the driver reads covers the version asked for (an unknown form, a missing
    part or sidecar, and the commits before it cleaned up): `LiveFileIndex` asks Delta's own
    snapshot for the table's files instead."""


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

    @property
    def add(self) -> dict[str, Any]:
        """Its `add` action, parsed from `action` at each call (a new dict each time)."""
        add: dict[str, Any] = json.loads(self.action)["add"]
        return add

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
        # each application's newest transaction; None: more than TXNS_KEPT applications
        self.txns: dict[str, dict[str, Any]] | None = {}
        self.domain_metadata = False  # did any commit carry domain metadata (not kept here)?
        # where the files were read from: a checkpoint's version (-1: the commits from version
        # 0), and why newer checkpoints were passed over; None: from Delta's own snapshot
        self.checkpoint: int | None = -1
        self.skipped: list[str] = []

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
            if self.txns is not None and (app in self.txns or len(self.txns) < TXNS_KEPT):
                self.txns[app] = txn
            else:
                self.txns = None  # without a retention none expires, so there stay too many
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
    return LiveFileIndex(DeltaLogReader(files, path, table), files, spark)


_SAID: set[tuple[str, str]] = set()  # (table, what): said in the log once per process
_SAID_LOCK = threading.Lock()


def _say_once(table_uri: str, what: str, message: str, *args: Any) -> None:
    with _SAID_LOCK:
        if (table_uri, what) in _SAID:
            return
        _SAID.add((table_uri, what))
    log.warning(message, *args)


class LiveFileIndex:
    """One table's live files, loaded on first use and kept current from its log reader.

    Merges of one table run on several threads: each catch-up happens under the index's lock.
    With `spark`, a table whose checkpoint the driver cannot read has its files loaded from
    Delta's own snapshot (`delta_live_files`), said once in the log; without it,
    `CheckpointUnreadable` is the caller's.
    """

    def __init__(
        self, log_reader: DeltaLogReader, files: HadoopFiles, spark: SparkSession | None = None
    ) -> None:
        self.log = log_reader
        self.files = files
        self.spark = spark
        self._live: LiveFiles | None = None
        self._lock = threading.Lock()
        self._unread: str | None = None  # why the files last came from Delta's snapshot

    def at(self, version: int) -> LiveFiles:
        """The live files at `version` (the newest version or later than the last fold): the
        commits since the last fold are folded in. `LogGap` when the log no longer holds them
        (the caller loads again); `CheckpointUnreadable` when no checkpoint can be read and the
        index has no Spark session to ask Delta with."""
        with self._lock:
            live = self._live
            if live is None or live.version > version:
                live = self._live = self._load(version)
            try:
                for v in range(live.version + 1, version + 1):
                    actions = self.log.commit(v)
                    if actions is None:
                        raise LogGap(f"{self.log.log_uri}: commit {v} is no longer in the log")
                    live.fold(v, actions)
            except LogGap:
                live = self._live = self._load(version)
            return live

    def _load(self, version: int) -> LiveFiles:
        uri = self.log.table_uri
        try:
            live = load_live_files(self.log, self.files, version)
        except CheckpointUnreadable as exc:
            if self.spark is None:
                raise
            self._unread = str(exc)
            _say_once(
                uri,
                "unread",
                "table at %s: the job cannot read its checkpoint (%s); its files come from Delta's "
                "own snapshot instead, one state rebuild each time they are loaded",
                uri,
                exc,
            )
            return delta_live_files(self.spark, uri, version)
        self._unread = None
        if live.skipped:
            _say_once(
                uri,
                "skipped",
                "table at %s: checkpoint(s) passed over (%s); its files were read from %s",
                uri,
                "; ".join(live.skipped),
                f"checkpoint {live.checkpoint}" if live.checkpoint != -1 else "its commits",
            )
        return live

    def unreadable(self) -> str | None:
        """Why the table's files come from Delta's snapshot instead of its log, None when they
        do not: loaded at the newest version first if they were not yet (Delta is not asked)."""
        with self._lock:
            if self._live is None:
                latest = self.log.latest_version()
                if latest < 0:
                    return None
                try:
                    self._live = load_live_files(self.log, self.files, latest)
                except CheckpointUnreadable as exc:
                    return str(exc)
                self._unread = None
            return self._unread

    def legacy_app_ids(self) -> int:
        """Per-plan transaction ids the table carried when last folded (0 before the first use)."""
        with self._lock:
            return 0 if self._live is None else len(self._live.legacy_app_ids)

    def forget(self) -> None:
        """Load again at the next use (after a commit this index cannot follow)."""
        with self._lock:
            self._live = None


def delta_live_files(spark: SparkSession, table_uri: str, version: int) -> LiveFiles:
    """The live files at `version` as Delta's own snapshot holds them (its state rebuilt, one
    Spark job): for a table whose checkpoint the driver cannot read."""
    from pyspark.sql import DataFrame

    jvm: Any = spark._jvm
    delta_log = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, table_uri
    )
    snapshot = delta_log.getSnapshotAt(version, scala_none(jvm), scala_none(jvm), False)
    live = LiveFiles(table_uri, version)
    live.checkpoint = None
    # each row one action, as the log writes it (unset fields left out); tombstones are not kept
    state = DataFrame(snapshot.stateDF().where("remove IS NULL").toJSON().toDF(), spark)
    for row in state.collect():
        action = json.loads(str(row[0]))
        if "add" in action:
            live.add(action["add"])
        elif action:
            live.note(action)
    return live


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One checkpoint of a table: its version, the names of its top-level files in `_delta_log`
    (every part of a multi-part one), and the `add` actions it holds when something says so."""

    version: int
    names: tuple[str, ...]
    adds: int | None = field(default=None, compare=False)

    @property
    def form(self) -> str:
        if len(self.names) > 1:
            return "multi-part"
        kind = checkpoint_name(self.names[0])
        return "UUID-named V2" if kind is not None and kind[1] == "uuid" else "classic"


def load_live_files(reader: DeltaLogReader, files: HadoopFiles, version: int) -> LiveFiles:
    """The live files at `version`: the newest checkpoint at or before it, then its commits.

    The checkpoint `_last_checkpoint` names is tried first; when there is none, it is newer than
    `version` or cannot be read, the complete checkpoints the log's listing holds, newest first,
    then the commits from version 0. `CheckpointUnreadable` when none of them serves, with each
    one's reason."""
    problems: list[str] = []
    hint = _last_checkpoint(reader, files)
    if hint is not None and hint.version <= version:
        try:
            return _load(reader, files, hint, version)
        except CheckpointUnreadable as exc:
            problems.append(str(exc))
    for found in _listed_checkpoints(reader, files, version):
        if found == hint:
            continue
        try:
            live = _load(reader, files, found, version)
        except CheckpointUnreadable as exc:
            problems.append(str(exc))
            continue
        live.skipped = problems
        return live
    try:
        live = _load(reader, files, None, version)
    except CheckpointUnreadable as exc:
        raise CheckpointUnreadable("; ".join([*problems, str(exc)])) from None
    live.skipped = problems
    return live


def _load(
    reader: DeltaLogReader, files: HadoopFiles, checkpoint: Checkpoint | None, version: int
) -> LiveFiles:
    start = -1 if checkpoint is None else checkpoint.version
    live = LiveFiles(reader.table_uri, start)
    live.checkpoint = start
    if checkpoint is not None:
        for entry in _checkpoint_actions(reader, files, checkpoint):
            if "add" in entry:
                live.add(entry["add"])
            else:
                live.note(entry)
    for v in range(start + 1, version + 1):
        actions = reader.commit(v)
        if actions is None:
            after = "no checkpoint covers it" if checkpoint is None else f"it follows checkpoint {start}"
            raise CheckpointUnreadable(f"{reader.log_uri}: commit {v} is gone and {after}")
        live.fold(v, actions)
    return live


def _last_checkpoint(reader: DeltaLogReader, files: HadoopFiles) -> Checkpoint | None:
    """The checkpoint `_last_checkpoint` names (None without one, or when it cannot be parsed:
    a hint, never the truth)."""
    text = files.read_text(f"{reader.log_uri}/_last_checkpoint")
    if not text:
        return None
    try:
        found = json.loads(text)
        version, parts = int(found["version"]), found.get("parts")
        v2 = found.get("v2Checkpoint") or {}
        adds = found.get("numOfAddFiles")
        if v2.get("path"):  # the UUID-named top-level file, by its name
            names: tuple[str, ...] = (str(v2["path"]).rsplit("/", 1)[-1],)
        elif parts:
            names = tuple(
                f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet"
                for i in range(1, int(parts) + 1)
            )
        else:
            names = (f"{version:020d}.checkpoint.parquet",)
        return Checkpoint(version, names, None if adds is None else int(adds))
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


_FORM_ORDER = {"uuid": 0, "classic": 1, "part": 2}  # within a version: V2 first, multi-part last


def _listed_checkpoints(reader: DeltaLogReader, files: HadoopFiles, version: int) -> list[Checkpoint]:
    """The complete checkpoints at or before `version` the log's listing holds, newest first (a
    multi-part checkpoint missing a part is none: the protocol has readers ignore it)."""
    found: list[tuple[int, int, tuple[str, ...]]] = []
    parts: dict[tuple[int, int], set[int]] = {}
    for name in listed_names(files, reader.log_uri):
        kind = checkpoint_name(name)
        if kind is None or kind[0] > version:
            continue
        at, form, part = kind
        if form == "part":
            assert part is not None
            parts.setdefault((at, part[1]), set()).add(part[0])
        else:
            found.append((at, _FORM_ORDER[form], (name,)))
    for (at, n), present in parts.items():
        if present == set(range(1, n + 1)):
            names = tuple(f"{at:020d}.checkpoint.{i:010d}.{n:010d}.parquet" for i in range(1, n + 1))
            found.append((at, _FORM_ORDER["part"], names))
    found.sort(key=lambda f: (-f[0], f[1], f[2]))
    return [Checkpoint(at, names) for at, _, names in found]


# Actions a checkpoint may hold (PROTOCOL.md, "Checkpoints"); `commitInfo` and `cdc` columns
# exist in Delta's own schema but are never set in one. Any other action is a form the driver
# does not know (an adaptive metadata tree's `checkpoint`, say), and Delta is asked instead.
_CHECKPOINT_ACTIONS = frozenset(
    {"add", "remove", "txn", "protocol", "metaData", "domainMetadata", "checkpointMetadata", "sidecar"}
)
_NEVER_SET = frozenset({"commitInfo", "cdc"})
_SIDECAR_ACTIONS = frozenset({"add", "remove"})
_SKIPPED_COLUMNS = frozenset({"remove"})  # tombstones: read neither in a checkpoint nor a sidecar


def _checkpoint_actions(
    reader: DeltaLogReader, files: HadoopFiles, checkpoint: Checkpoint
) -> Iterator[dict[str, Any]]:
    """The checkpoint's entries but its tombstones and its V2 bookkeeping (`checkpointMetadata`,
    `sidecar`), as the commit files write them: its top-level files' actions, then those of the
    sidecars they name. `CheckpointUnreadable` for a file missing or not understood, or when the
    `add` actions read are not as many as the checkpoint says it holds."""
    log_uri = reader.log_uri
    sidecars: list[dict[str, Any]] = []
    expected = checkpoint.adds
    adds = 0
    for name in checkpoint.names:
        for action in _file_actions(files, f"{log_uri}/{name}", _CHECKPOINT_ACTIONS):
            if "sidecar" in action:
                sidecars.append(action["sidecar"])
            elif "checkpointMetadata" in action:
                meta = action["checkpointMetadata"]
                if int(meta.get("version", checkpoint.version)) != checkpoint.version:
                    raise CheckpointUnreadable(
                        f"{log_uri}: checkpoint {name} says it is of version {meta.get('version')}"
                    )
                tagged = (meta.get("tags") or {}).get("numOfAddFiles")
                if tagged is not None:
                    expected = int(tagged)
            else:
                adds += "add" in action
                yield action
    for sidecar in sidecars:
        if sidecar.get("type") or sidecar.get("sidecarType"):
            raise CheckpointUnreadable(
                f"{log_uri}: checkpoint {checkpoint.names[0]} has a sidecar of type "
                f"{sidecar.get('type') or sidecar.get('sidecarType')!r}, a form the job does not read"
            )
        for action in _file_actions(files, _sidecar_uri(log_uri, str(sidecar["path"])), _SIDECAR_ACTIONS):
            adds += 1
            yield action
    if expected is not None and adds != expected:
        raise CheckpointUnreadable(
            f"{log_uri}: checkpoint {checkpoint.version} ({checkpoint.form}) holds {adds} add action(s), "
            f"not the {expected} it records"
        )


def _sidecar_uri(log_uri: str, path: str) -> str:
    """A sidecar's URI: the `sidecar` action's path is URI-encoded, a name under
    `_delta_log/_sidecars/` as Delta writes it, or a URI of its own."""
    if urlsplit(path).scheme or path.startswith("/"):
        return path
    return f"{log_uri}/_sidecars/{unquote(path)}"


def _file_actions(files: HadoopFiles, uri: str, allowed: frozenset[str]) -> Iterator[dict[str, Any]]:
    """The actions of one checkpoint file, JSON lines or Parquet, tombstones left out."""
    data = files.read_bytes(uri)
    if data is None:
        raise CheckpointUnreadable(f"{uri}: the checkpoint's file is missing")
    try:
        if uri.endswith(".json"):
            actions = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
        else:
            actions = list(_parquet_actions(data, allowed))
    except Exception as exc:  # Arrow's and JSON's errors alike: a file the driver cannot parse
        raise CheckpointUnreadable(f"{uri}: cannot be read ({type(exc).__name__}: {exc})") from exc
    for action in actions:
        if not isinstance(action, dict) or len(action) != 1:
            raise CheckpointUnreadable(f"{uri}: a line that is not one action")
        kind = next(iter(action))
        if kind in _NEVER_SET or kind in _SKIPPED_COLUMNS:
            continue
        if kind not in allowed:
            raise CheckpointUnreadable(f"{uri}: holds a {kind!r} action, a form the job does not read")
        yield action


def _parquet_actions(data: bytes, allowed: frozenset[str]) -> Iterator[dict[str, Any]]:
    """The actions of a checkpoint's Parquet file, one per set column of each row. Tombstones
    are not read; a column of an action not `allowed` is read only to see it unset."""
    import pyarrow.parquet as pq

    names = pq.read_schema(io.BytesIO(data)).names
    columns = [c for c in names if c not in _SKIPPED_COLUMNS and c not in _NEVER_SET]
    table = pq.read_table(io.BytesIO(data), columns=columns)
    for column in columns:
        values = table.column(column)
        if column not in allowed:
            if values.null_count != len(values):
                raise ValueError(f"it holds {column!r} actions, a form the job does not read")
            continue
        for value in values.to_pylist():
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
    for key, field_value in value.items():
        if field_value is None or key.endswith("_parsed"):
            continue
        if key in _MAPS and isinstance(field_value, list):  # Arrow reads a map as (key, value) pairs
            field_value = dict(field_value)
        elif isinstance(field_value, dict):
            field_value = _plain(field_value)
        out[key] = field_value
    return out

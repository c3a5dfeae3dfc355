"""Reading a table's Delta log directly: its newest commits, cached, on any file system.

Commits are `_delta_log/<version, 20 digits>.json` (the Delta protocol), and a
commit never changes once written. Two questions come up in every batch: "is
this plan already committed, and what did it write?" and "do these announced
segments have rows?". The newest commits answer both; each is read once and
kept while the cache's budget allows (`CommitCache`), and new ones are found
by looking for the next version's file, so a batch reads only what was
committed since the last one, with no directory listing and no Spark job.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from compactor.delta.files import HadoopFiles
from compactor.delta.log.commit_metadata import commit_record, parse_metadata
from compactor.delta.paths import SEGMENT_COLUMN
from compactor.delta.store import TableChanges
from compactor.domain.segments import Segment
from compactor.errors import CompactorError, LogGap

RECENT_COMMITS = 50  # how far back the fast paths look before asking Delta itself
# Parsed commits are kept within a budget of their log text, over every table a store reads: the
# fast paths mostly read each table's newest few commits, and a cap per table (64 commits, then
# 256) grew with the tables' count and filled for thousands of merges in a years run (the driver's
# Python rising by 14-25 MiB per 1,000 merges). Parsed, a byte of text takes about five: 4 MiB of
# text is about 20 MB: the newest two commits of each of a thousand tables.
COMMIT_CACHE_BYTES = 4 << 20
ONE_READER_BYTES = 1 << 20  # a reader made for one question, with a cache of its own

Actions = list[dict[str, Any]]


class CommitCache:
    """Parsed commits by (log, version), the least recently used leaving first once their text
    passes `budget` bytes. A commit never changes once written, so a cached one is never stale.
    Thread-safe: one cache serves the readers of every table of a store."""

    def __init__(self, budget: int = COMMIT_CACHE_BYTES) -> None:
        self.budget = budget
        self.held = 0  # bytes of log text behind the commits kept
        self._kept: OrderedDict[tuple[str, int], tuple[Actions, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, log_uri: str, version: int) -> Actions | None:
        with self._lock:
            found = self._kept.get((log_uri, version))
            if found is None:
                return None
            self._kept.move_to_end((log_uri, version))
            return found[0]

    def put(self, log_uri: str, version: int, actions: Actions, size: int) -> None:
        """Keep a commit read from `size` bytes of text; one larger than the budget is not kept."""
        if size > self.budget:
            return
        with self._lock:
            if (log_uri, version) in self._kept:
                return
            self._kept[(log_uri, version)] = (actions, size)
            self.held += size
            while self.held > self.budget:
                _, (_, freed) = self._kept.popitem(last=False)
                self.held -= freed


@dataclass(frozen=True, slots=True)
class CommitFacts:
    """What one of our commits recorded: its version, rows and bytes written, the segments
    it added (sized from its metrics), and whether it changed data (commits written
    before that was recorded all did)."""

    version: int
    records: int
    bytes: int
    added: tuple[Segment, ...] = ()
    data_change: bool = True
    timestamp_ms: int | None = None  # when Delta began the commit (commitInfo), after the files were written


class DeltaLogReader:
    """The newest commits of one table, read through Hadoop and kept in `cache` (shared by the
    readers of a store; a reader alone gets a small one of its own)."""

    def __init__(
        self, files: HadoopFiles, table_uri: str, table: str, cache: CommitCache | None = None
    ) -> None:
        self.files = files
        self.table_uri = table_uri.rstrip("/")
        self.log_uri = self.table_uri + "/_delta_log"
        self.table = table
        self._latest: int | None = None
        self.cache = cache if cache is not None else CommitCache(ONE_READER_BYTES)
        # merges of one table run on several threads, beside the batch's reads
        self._lock = threading.RLock()

    def _file(self, version: int) -> str:
        return f"{self.log_uri}/{version:020d}.json"

    def latest_version(self) -> int:
        """The newest committed version (-1 for no table), found without listing the log:
        from the last checkpoint (or the last version seen), look for later versions' files,
        doubling the step, then halve back to the last one that exists."""
        with self._lock:
            return self._latest_version()

    def _latest_version(self) -> int:
        if self._latest is None:
            self._latest = self._checkpointed()
        known, step = self._latest, 1
        while self.files.exists(self._file(known + step)):
            known, step = known + step, step * 2
        missing = known + step  # commits are contiguous: the newest lies in [known, missing)
        while missing - known > 1:
            middle = (known + missing) // 2
            if self.files.exists(self._file(middle)):
                known = middle
            else:
                missing = middle
        self._latest = known
        return known

    def _checkpointed(self) -> int:
        """Where the search for the newest version starts: the version `_last_checkpoint` names
        (absent until the first checkpoint); without it, -1 while version 0 is there, else
        the newest version the log's listing holds (cleanup removed the first commits and the
        hint is gone: a checkpoint with no `_last_checkpoint` pointing at it)."""
        text = self.files.read_text(f"{self.log_uri}/_last_checkpoint")
        if text:
            try:
                return int(json.loads(text)["version"])
            except (TypeError, ValueError, KeyError):
                pass  # a hint, never the truth: the listing says
        elif self.files.exists(self._file(0)):
            return -1
        versions = [log_file_version(n) for n in listed_names(self.files, self.log_uri)]
        return max((v for v in versions if v is not None), default=-1)

    def commit(self, version: int) -> Actions | None:
        """The actions of one commit, or None when its file is gone (log cleanup)."""
        with self._lock:
            return self._commit(version)

    def _commit(self, version: int) -> Actions | None:
        found = self.cache.get(self.log_uri, version)
        if found is not None:
            return found
        text = self.files.read_text(self._file(version))
        if text is None:
            return None
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        self.cache.put(self.log_uri, version, actions, len(text))
        return actions

    def recent(self, depth: int) -> Iterator[tuple[int, Actions]]:
        """(version, actions) of the last `depth` commits, newest first, while they exist."""
        latest = self.latest_version()
        for version in range(latest, max(-1, latest - depth), -1):
            actions = self.commit(version)
            if actions is None:
                return
            yield version, actions

    def since(self, version: int) -> list[tuple[int, Actions]]:
        """Every commit after `version`, oldest first; `LogGap` if any was cleaned up."""
        found = []
        for v in range(version + 1, self.latest_version() + 1):
            actions = self.commit(v)
            if actions is None:
                raise LogGap(f"{self.log_uri}: commit {v} is no longer in the log")
            found.append((v, actions))
        return found

    def changes_since(self, version: int) -> TableChanges:
        """Our commits after `version` as catalog records, and the versions of commits someone
        else wrote that added or removed files (loads without metadata, deletes, OPTIMIZE)."""
        records, foreign = [], []
        latest = version
        for v, actions in self.since(version):
            latest = v
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            meta = parse_metadata(info.get("userMetadata"))
            if meta is not None:
                records.append(
                    commit_record(self.table, v, meta, info.get("operationMetrics"), commit_time(info))
                )
            elif any("add" in a or "remove" in a for a in actions):
                foreign.append(v)
        return TableChanges(records, foreign, latest)

    def find(self, marker: str, depth: int = RECENT_COMMITS) -> CommitFacts | None:
        """The newest of the last `depth` commits whose metadata mentions `marker`."""
        for version, actions in self.recent(depth):
            info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
            if info is not None and marker in (info.get("userMetadata") or ""):
                return commit_facts(self.table, version, info)
        return None

    def newest_file(self, segment_ids: Collection[str], depth: int = RECENT_COMMITS) -> str | None:
        """The path (as the log writes it) of the newest non-empty file added for one of the
        segments in the last `depth` commits; None if none of them added one."""
        for _, actions in self.recent(depth):
            for action in actions:
                add = action.get("add")
                if (
                    add
                    and add.get("size")
                    and (add.get("partitionValues") or {}).get(SEGMENT_COLUMN) in segment_ids
                ):
                    return str(add["path"])
        return None

    def written(self, marker: str) -> CommitFacts:
        """The facts of the commit this process just wrote (it is the newest or nearly)."""
        found = self.find(marker)
        if found is None:
            raise CompactorError(
                f"commit for {marker} not found in the last {RECENT_COMMITS} versions of {self.log_uri}"
            )
        return found

    def added_recently(self, segment_ids: set[str], depth: int) -> set[str]:
        """Ids whose partition got a non-empty file in one of the last `depth` commits, untouched since.

        A file leaves the snapshot only through a later `remove`, so an `add` with
        rows and no newer action on its partition proves the rows are there. An id
        whose newest action is a `remove`, or that no recent commit touched, is left
        for the caller to look up.
        """
        found: set[str] = set()
        decided: set[str] = set()
        for _, actions in self.recent(depth):
            if decided >= segment_ids:
                break
            # id -> this commit added a file with rows for it; False (a remove, or no row count) settles
            # nothing, but older commits cannot settle it either: the caller looks it up
            touched: dict[str, bool] = {}
            for action in actions:
                entry = action.get("add") or action.get("remove")
                sid = segment_partition_value(entry)
                if sid in segment_ids and sid not in decided:
                    stats = json.loads(action["add"].get("stats") or "{}") if "add" in action else {}
                    touched[sid] = touched.get(sid, False) or bool(stats.get("numRecords", 0))
                # a merge that moved its inputs' files (promote) removes no file: its metadata says
                for sid in _removed_by(action) & segment_ids - decided:
                    touched.setdefault(sid, False)
            decided |= touched.keys()
            found |= {sid for sid, added in touched.items() if added}
        return found


def commit_time(info: dict[str, Any]) -> datetime | None:
    """When a commit was made, from its `commitInfo` (epoch milliseconds)."""
    millis = info.get("timestamp")
    return datetime.fromtimestamp(millis / 1000, UTC) if isinstance(millis, int) else None


def commit_facts(table: str, version: int, info: dict[str, Any]) -> CommitFacts:
    """The facts of one commit from its `commitInfo` action (or a history row's fields)."""
    metrics = info.get("operationMetrics") or {}
    meta = parse_metadata(info.get("userMetadata")) or {}
    record = commit_record(table, version, meta, metrics) if meta else None
    added = tuple(record.sized(s, None) for s in record.added) if record else ()
    if meta.get("exact_sizes"):  # a merge that moved files: no write metrics, its metadata is exact
        records, size = sum(s.records for s in added), sum(s.bytes for s in added)
    else:  # an overwrite that wrote nothing has no numOutputRows
        records, size = int(metrics.get("numOutputRows", 0)), int(metrics.get("numOutputBytes", 0))
    stamp = info.get("inCommitTimestamp") or info.get("timestamp")
    return CommitFacts(
        version,
        records,
        size,
        added,
        bool(meta.get("data_change", True)),
        int(stamp) if isinstance(stamp, int | float) else None,
    )


def _removed_by(action: dict[str, Any]) -> set[str]:
    """The segment ids a commit's compactor metadata says it replaced (none for other actions)."""
    meta = parse_metadata(action["commitInfo"].get("userMetadata")) if "commitInfo" in action else None
    return set(meta.get("removed", [])) if meta else set()


# a checkpoint's file names (PROTOCOL.md, "Checkpoint Naming Scheme"): classic, multi-part, UUID-named (V2)
_CHECKPOINT = re.compile(
    r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})\.parquet|\.([0-9a-fA-F-]{36})\.(?:json|parquet)|\.parquet)$"
)
_COMMIT = re.compile(r"^(\d{20})\.json$")


def checkpoint_name(name: str) -> tuple[int, str, tuple[int, int] | None] | None:
    """(version, form, (part, parts) of a multi-part one) of a checkpoint's top-level file name;
    form is "classic", "part" or "uuid". None for any other name."""
    found = _CHECKPOINT.match(name)
    if found is None:
        return None
    version, part, parts, uuid = found.groups()
    if part is not None:
        return int(version), "part", (int(part), int(parts))
    return int(version), "uuid" if uuid is not None else "classic", None


def log_file_version(name: str) -> int | None:
    """The version a commit's or a checkpoint's file name says (None for any other file)."""
    commit = _COMMIT.match(name)
    if commit is not None:
        return int(commit.group(1))
    checkpoint = checkpoint_name(name)
    return None if checkpoint is None else checkpoint[0]


def listed_names(files: HadoopFiles, log_uri: str) -> list[str]:
    """The names in a `_delta_log` folder: a listing, asked for only when `_last_checkpoint`
    cannot say (through Hadoop, one round trip per entry: read directly on a local disk)."""
    local = files.local_path(log_uri)
    if local is not None:
        try:
            return os.listdir(local)
        except FileNotFoundError:
            return []
    return files.list_names(log_uri)


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

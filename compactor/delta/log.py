"""Reading the newest commits of a table's Delta log directly.

Commits are `_delta_log/<version, 20 digits>.json` (the Delta protocol). Two
questions come up in every batch: "is this plan already committed, and what
did it write?" and "do these announced segments have rows?". The newest commit
files answer both in milliseconds, where `DeltaTable.history()` or a snapshot
query costs a Spark round trip and a state rebuild.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactor.delta.commit_metadata import commit_record, parse_metadata
from compactor.delta.paths import SEGMENT_COLUMN
from compactor.domain.segments import Segment
from compactor.errors import CompactorError

RECENT_COMMITS = 50  # how far back the fast paths look before asking Delta itself


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


def commit_files(path: Path) -> list[tuple[int, Path]]:
    """The table's commit files, newest first."""
    commits = []
    with os.scandir(path / "_delta_log") as entries:
        for entry in entries:
            stem, _, ext = entry.name.partition(".")
            if ext == "json" and len(stem) == 20 and stem.isdigit():
                commits.append((int(stem), Path(entry.path)))
    return sorted(commits, reverse=True)


def recent_commits(path: Path, depth: int) -> Iterator[tuple[int, list[str]]]:
    """(version, JSON lines) of the last `depth` commits, newest first."""
    for version, file in commit_files(path)[:depth]:
        try:
            yield version, file.read_text().splitlines()
        except FileNotFoundError:  # removed by log cleanup after the listing
            continue


def commit_facts(table: str, version: int, info: dict[str, Any]) -> CommitFacts:
    """The facts of one commit from its `commitInfo` action (or a history row's fields)."""
    metrics = info.get("operationMetrics") or {}
    meta = parse_metadata(info.get("userMetadata")) or {}
    record = commit_record(table, version, meta, metrics) if meta else None
    added = tuple(record.sized(s, None) for s in record.added) if record else ()
    return CommitFacts(
        version,
        int(metrics.get("numOutputRows", 0)),
        int(metrics.get("numOutputBytes", 0)),
        added,
        bool(meta.get("data_change", True)),
    )


def find_commit(path: Path, marker: str, depth: int = RECENT_COMMITS) -> CommitFacts | None:
    """The newest of the last `depth` commits whose metadata mentions `marker`."""
    for version, lines in recent_commits(path, depth):
        for line in lines:
            info = json.loads(line).get("commitInfo") if '"commitInfo"' in line else None
            if info is not None and marker in (info.get("userMetadata") or ""):
                return commit_facts(path.name, version, info)
    return None


def written_commit(path: Path, marker: str) -> CommitFacts:
    """The facts of the commit this process just wrote (it is the newest or nearly)."""
    found = find_commit(path, marker)
    if found is None:
        raise CompactorError(f"commit for {marker} not found in the last {RECENT_COMMITS} versions of {path}")
    return found


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


def added_recently(path: Path, segment_ids: set[str], depth: int) -> set[str]:
    """Ids whose partition got a non-empty file in one of the last `depth` commits, untouched since.

    A file leaves the snapshot only through a later `remove`, so an `add` with
    rows and no newer action on its partition proves the rows are there. An id
    whose newest action is a `remove`, or that no recent commit touched, is left
    for the caller to look up.
    """
    found: set[str] = set()
    decided: set[str] = set()
    for _, lines in recent_commits(path, depth):
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
                touched[sid] = touched.get(sid, False) or bool(stats.get("numRecords", 0))
        decided |= touched.keys()
        found |= {sid for sid, added in touched.items() if added}
    return found

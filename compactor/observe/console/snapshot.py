"""What the console shows, as plain values (pure): one row per table for the warehouse page, a
table's details, the shards, the dead letters; and the warehouse page's sorting, filtering and
paging. The sources (`sources.py`) fill these from a running job or from the warehouse; the
pages only render them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from compactor.observe.pictures.timeline import Timeline

PAGE_SIZE = 50
LEAST_HEALTHY = 10


@dataclass(frozen=True, slots=True)
class TableRow:
    """One table on the warehouse page."""

    table: str
    word: str  # the status in words (`awaiting 3 segments (12 MiB)`, `disabled`, ...)
    state: str  # what the word starts with: merged, awaiting, merging, waiting, quarantined, disabled
    score: int | None  # health, 0..100 (None: not known)
    segments: int
    bytes: int
    awaiting_segments: int
    awaiting_bytes: int
    trend: str  # where the debt goes: `falling (paid in 2h)`, `stuck`, `not falling`, `none`
    next_due: datetime | None
    merging: bool

    @property
    def merged_share(self) -> float:
        """The share of its segments not waiting for a merge (1 when it has none)."""
        if self.segments == 0:
            return 1.0
        return max(0.0, (self.segments - self.awaiting_segments) / self.segments)


SORT_KEYS: dict[str, Callable[[TableRow], Any]] = {
    "table": lambda r: r.table,
    "status": lambda r: (r.state, r.table),
    "health": lambda r: (r.score if r.score is not None else 101, r.table),
    "merged": lambda r: (r.merged_share, r.table),
    "awaiting": lambda r: (r.awaiting_bytes, r.awaiting_segments, r.table),
    "segments": lambda r: (r.segments, r.table),
    "due": lambda r: (r.next_due is None, r.next_due or datetime.max, r.table),
}


@dataclass(frozen=True, slots=True)
class MergeRow:
    """One merge's result, as the results topic (or the table's history) tells it."""

    table: str
    plan_id: str
    rule: str
    status: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    bytes_in: int | None
    bytes_out: int | None
    duration_ms: int | None
    layout: str | None
    deleted_rows: int | None  # rows an upsert compaction dropped
    at: datetime | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    offset: str  # partition/offset on the dead-letter topic
    table: str  # the message's key (events are keyed by their table)
    reason: str
    detail: str
    source: str  # where the refused message came from (topic/partition/offset)
    value: bytes  # the original bytes


@dataclass(frozen=True, slots=True)
class ShardRow:
    index: int
    owner: str | None
    queries: tuple[str, ...]
    behind: int | None
    tables: int


@dataclass(frozen=True, slots=True)
class Totals:
    tables: int
    segments: int
    bytes: int
    awaiting_segments: int
    awaiting_bytes: int
    merges_per_minute: float | None  # over the recent results (None: no broker to read them from)
    lag: float | None  # events behind on the segments topic (None: not known)


@dataclass(frozen=True, slots=True)
class Warehouse:
    rows: tuple[TableRow, ...]
    totals: Totals
    taken_at: datetime
    notes: tuple[str, ...] = ()  # what the console cannot show, and why (no broker, ...)

    def least_healthy(self, count: int = LEAST_HEALTHY) -> list[TableRow]:
        scored = [r for r in self.rows if r.score is not None and r.score < 100]
        return sorted(scored, key=SORT_KEYS["health"])[:count]

    def page(self, query: str = "", sort: str = "health", descending: bool = False, page: int = 1) -> Page:
        """The rows whose name holds `query`, sorted by `sort`, `PAGE_SIZE` at a time."""
        if sort not in SORT_KEYS:
            sort = "health"
        found = [r for r in self.rows if query.lower() in r.table.lower()]
        found.sort(key=SORT_KEYS[sort], reverse=descending)
        pages = max(1, -(-len(found) // PAGE_SIZE))
        page = min(max(1, page), pages)
        start = (page - 1) * PAGE_SIZE
        return Page(tuple(found[start : start + PAGE_SIZE]), len(found), page, pages, sort, descending, query)


@dataclass(frozen=True, slots=True)
class Page:
    rows: tuple[TableRow, ...]
    matched: int
    number: int
    pages: int
    sort: str
    descending: bool
    query: str


@dataclass(frozen=True, slots=True)
class PlanRow:
    """A merge the rules would make now, and why (the `plan --explain` text)."""

    plan_id: str
    rule: str
    inputs: tuple[str, ...]
    bytes_in: int
    reason: str


@dataclass(frozen=True)
class TableDetail:
    row: TableRow
    timeline: Timeline
    running: frozenset[str]  # segments in merges in flight
    running_plans: tuple[str, ...]  # their plan ids
    plans: tuple[PlanRow, ...]
    merges: tuple[MergeRow, ...]
    config: dict[str, Any]  # the effective settings, as JSON
    overrides: frozenset[str]  # the top-level keys the table sets itself (the rest are defaults)
    dead_letters: tuple[DeadLetterRow, ...]
    failures: tuple[str, ...]  # failed plans still cooling down, in words
    notes: tuple[str, ...] = field(default=())


def trend_words(
    eta: timedelta | None, stuck: bool, debt_bytes: int, drain_per_hour: float | None = None
) -> str:
    """Where a table's debt goes, in a few words."""
    if debt_bytes == 0:
        return "none"
    if stuck:
        return "stuck"
    if eta is not None:
        return f"falling (paid in {_duration(eta)})"
    if drain_per_hour is not None and drain_per_hour < 0:
        return "rising"
    return "not falling yet"


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 90 * 60:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def merges_per_minute(merges: Sequence[MergeRow], now: datetime, window: timedelta) -> float:
    """Merges that succeeded in the last `window`, per minute."""
    since = now - window
    done = sum(1 for m in merges if m.status == "SUCCEEDED" and m.at is not None and m.at >= since)
    return done / (window.total_seconds() / 60)

"""Segments and time ranges: what a table is made of.

Pure values (stdlib only). Time ranges are half-open [start, end) and always
timezone-aware UTC, so comparisons never mix naive and aware datetimes.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from compactor.errors import InvalidSegmentError

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SEGMENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


def validate_table_name(name: str) -> str:
    """Return `name` if it is a safe table name (also a directory name), else raise."""
    if not isinstance(name, str) or not TABLE_NAME.match(name):
        raise InvalidSegmentError(
            f"table name {name!r} is invalid: use 1-128 letters, digits or '_', not starting with a digit"
        )
    return name


def validate_segment_id(segment_id: str) -> str:
    """Return `segment_id` if it is safe to embed in a predicate and a path, else raise."""
    if not isinstance(segment_id, str) or not SEGMENT_ID.match(segment_id):
        raise InvalidSegmentError(
            f"segment id {segment_id!r} is invalid: use 1-200 of letters, digits, '_', '.', ':', '-'"
        )
    return segment_id


def utc(value: datetime) -> datetime:
    """Normalise to aware UTC; naive datetimes are taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@dataclass(frozen=True, slots=True, order=True)
class TimeRange:
    """A half-open interval [start, end) of event time."""

    start: datetime
    end: datetime
    # epoch seconds of start and end, computed once: planners compare millions of them
    start_ts: float = field(init=False, repr=False, compare=False)
    end_ts: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", utc(self.start))
        object.__setattr__(self, "end", utc(self.end))
        object.__setattr__(self, "start_ts", self.start.timestamp())
        object.__setattr__(self, "end_ts", self.end.timestamp())
        if self.end <= self.start:
            raise InvalidSegmentError(
                f"time range end {self.end.isoformat()} is not after start {self.start.isoformat()}"
            )

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    def overlaps(self, other: TimeRange) -> bool:
        return self.start < other.end and other.start < self.end

    def covers(self, other: TimeRange) -> bool:
        return self.start <= other.start and other.end <= self.end

    def __str__(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()})"


class SegmentState(StrEnum):
    """Lifecycle of a segment; only ONLINE segments are merged."""

    LOADING = "LOADING"
    ONLINE = "ONLINE"
    REFRESHING = "REFRESHING"


class Origin(StrEnum):
    """What produced a segment."""

    LOAD = "load"
    MERGE = "merge"
    REFRESH = "refresh"


class RowCount(NamedTuple):
    """A segment's rows as its files hold them: visible, and hidden by deletion vectors
    (`visible` is -1 when a file has no statistics); and its files' bytes."""

    visible: int
    hidden: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class Segment:
    """One load's worth of rows in a table, or the output of a merge.

    `level` counts level-threshold compactions (0 = loaded, 1 and 2 = minor
    compaction levels); `loaded_at` is when the data became available, which
    `preserve_latest` and `allowed_compaction_days` look at.
    """

    id: str
    table: str
    range: TimeRange
    loaded_at: datetime
    records: int = 0
    bytes: int = 0
    sub_partitions: frozenset[str] = frozenset()
    state: SegmentState = SegmentState.ONLINE
    schema_version: int = 1
    level: int = 0
    origin: Origin = Origin.LOAD
    # sub-partition values that are not ONLINE (LOADING or REFRESHING), sorted by value
    sub_partition_states: tuple[tuple[str, SegmentState], ...] = ()
    # the table layout (config version and build settings, canonical JSON) the segment was built with
    built_with: str = ""
    # indexes built for the segment (Kylin's per-segment indexes); merges keep them, so inputs must agree
    indexes: frozenset[str] = frozenset()
    # rows other writers deleted (DELETE, UPDATE) that deletion vectors still hide in the segment's
    # files; `records` counts only the visible rows. A purge rewrites the files without them.
    deleted: int = 0

    def __post_init__(self) -> None:
        validate_table_name(self.table)
        validate_segment_id(self.id)
        object.__setattr__(self, "loaded_at", utc(self.loaded_at))
        states = tuple(sorted((v, s) for v, s in self.sub_partition_states if s is not SegmentState.ONLINE))
        object.__setattr__(self, "sub_partition_states", states)
        unknown = sorted({v for v, _ in states} - self.sub_partitions)
        if unknown:
            raise InvalidSegmentError(
                f"segment {self.id}: states given for sub-partitions it lacks: {unknown}"
            )
        if self.records < 0:
            raise InvalidSegmentError(f"segment {self.id}: records {self.records} is negative")
        if self.bytes < 0:
            raise InvalidSegmentError(f"segment {self.id}: bytes {self.bytes} is negative")
        if self.deleted < 0:
            raise InvalidSegmentError(f"segment {self.id}: deleted {self.deleted} is negative")

    @property
    def settled(self) -> bool:
        """ONLINE with every sub-partition ONLINE: only settled segments may merge."""
        return self.state is SegmentState.ONLINE and not self.sub_partition_states

    @property
    def is_empty(self) -> bool:
        """A merge's output that kept no row (an upsert merge whose every row was superseded):
        Delta holds no file of it, so the table's file list never names it."""
        return self.origin is not Origin.LOAD and self.records == 0 and self.deleted == 0

    def sub_partition_state(self, value: str) -> SegmentState | None:
        """The state of one sub-partition value, None when the segment has not built it."""
        if value not in self.sub_partitions:
            return None
        return dict(self.sub_partition_states).get(value, SegmentState.ONLINE)

    @property
    def built(self) -> tuple[frozenset[str], frozenset[str]]:
        """What was built for the segment: its sub-partition values and its indexes.

        Kylin merges segments only when both agree, so every merge rule groups by this.
        """
        return self.sub_partitions, self.indexes

    @property
    def start(self) -> datetime:
        return self.range.start

    @property
    def end(self) -> datetime:
        return self.range.end

    @property
    def deleted_ratio(self) -> float:
        """The share of the rows in the segment's files that deletion vectors hide."""
        stored = self.records + self.deleted
        return self.deleted / stored if stored else 0.0

    def same_content(self, other: Segment) -> bool:
        """True when `other` describes this segment identically (a duplicate event), or as it
        was before other writers deleted rows that deletion vectors now hide."""
        if self == other:
            return True
        as_known = replace(other, records=self.records, bytes=self.bytes, deleted=self.deleted)
        return self.deleted > 0 and as_known == self and self.records + self.deleted == other.records


def new_segment_id(table: str, start: datetime) -> str:
    """A fresh id for a load: `<table>-<start>-<8 random hex digits>`."""
    return f"{table}-{start:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def with_state(segment: Segment, state: SegmentState) -> Segment:
    return replace(segment, state=state)

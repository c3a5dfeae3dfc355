"""`compactor timeline`: where a table's segments sit in time, level by level (pure layout).

One row per level and sub-partition set (segments merge only within both), each segment a box
over its event-time range. Outputs of merges committed in the recent window are flagged so the
picture shows what the compactor has just done. Drawing is in `timeline_plot`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from compactor.catalog.changes import CommitRecord
from compactor.domain.segments import Segment

MERGE_OPS = frozenset({"merge", "refresh"})


@dataclass(frozen=True, slots=True)
class Box:
    segment: Segment
    row: int  # index into Timeline.rows
    recent: bool  # written by a merge or refresh committed inside the recent window


@dataclass(frozen=True, slots=True)
class Timeline:
    table: str
    rows: tuple[str, ...]  # labels, lowest level first
    boxes: tuple[Box, ...]
    recent: timedelta

    @property
    def recently_merged(self) -> int:
        return sum(b.recent for b in self.boxes)

    def describe(self) -> str:
        """One line for a title and the image's metadata."""
        total = sum(b.segment.bytes for b in self.boxes)
        hours = self.recent.total_seconds() / 3600
        return (
            f"table {self.table}: {len(self.boxes)} segments, {total} bytes, {len(self.rows)} lanes; "
            f"{self.recently_merged} written by merges in the last {hours:g} h"
        )


def row_label(segment: Segment) -> str:
    subs = ",".join(sorted(segment.sub_partitions))
    return f"L{segment.level}" + (f" {{{subs}}}" if subs else "")


def layout(
    table: str,
    segments: Sequence[Segment],
    history: Sequence[CommitRecord],
    now: datetime,
    recent: timedelta,
) -> Timeline:
    """The table's boxes; `history` (oldest first or not) says which segments merges just wrote."""
    since = now - recent
    fresh = {
        s.id
        for c in history
        if c.op in MERGE_OPS and c.committed_at is not None and c.committed_at >= since
        for s in c.added
    }
    keys = sorted({(s.level, tuple(sorted(s.sub_partitions))) for s in segments})
    labels = {key: i for i, key in enumerate(keys)}
    boxes = tuple(
        Box(s, labels[(s.level, tuple(sorted(s.sub_partitions)))], s.id in fresh)
        for s in sorted(segments, key=lambda s: (s.range.start, s.id))
    )
    rows = [""] * len(keys)
    for box in boxes:
        rows[box.row] = row_label(box.segment)
    return Timeline(table, tuple(rows), boxes, recent)

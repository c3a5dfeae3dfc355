"""Filters every rule shares: completed only, merge enabled, preserve_latest,
allowed_compaction_days and lookback.

Each filter is a boundary: the newest loads the table keeps in order
(`TableSegments.newest`, never a sort of the table), and two instants derived from
`now`. So a segment passes or not by its own values, and an attempt near new segments
filters only the segments it looks at. The masks are computed over columns; reasons are
written (with `explain`) only for the segments kept out.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from compactor.config.tables import TableSettings
from compactor.domain.columns import Bools, SegmentColumns
from compactor.domain.plans import Decision, SkipReason
from compactor.domain.segments import Segment, SegmentState


@dataclass(frozen=True, slots=True)
class Boundaries:
    """Where the shared filters cut a table at one instant."""

    preserved: frozenset[str]  # ids of the `preserve_latest` newest loads
    oldest_load: datetime | None  # allowed_compaction_days
    oldest_data: datetime | None  # lookback

    @classmethod
    def of(cls, segments: SegmentColumns, settings: TableSettings, now: datetime) -> Boundaries:
        """`segments`: the whole table (the newest loads are the table's)."""
        days = settings.allowed_compaction_days
        return cls(
            frozenset(segments.newest(settings.preserve_latest)),
            now - timedelta(days=days) if days else None,
            now - settings.lookback if settings.lookback else None,
        )

    def keep(self, segments: SegmentColumns, settings: TableSettings) -> tuple[Bools, Bools]:
        """Which of `segments` pass, and which are preserved."""
        n = len(segments)
        keep: Bools = segments.settled.copy() if settings.merge_enabled else np.zeros(n, np.bool_)
        preserved = segments.mask(self.preserved) if self.preserved else np.zeros(n, np.bool_)
        keep &= ~preserved
        if self.oldest_load is not None:
            keep &= segments.loaded >= self.oldest_load.timestamp()
        if self.oldest_data is not None:
            keep &= segments.end >= self.oldest_data.timestamp()
        return keep, preserved


def shared_filter(
    segments: SegmentColumns,
    settings: TableSettings,
    now: datetime,
    rule: str,
    explain: bool = True,
    bounds: Boundaries | None = None,
) -> tuple[SegmentColumns, list[Decision]]:
    """Split `segments` into those `rule` may consider and (if `explain`) decisions for the rest.
    `bounds`: the table's (default: taken from `segments`, then the whole table)."""
    bounds = bounds or Boundaries.of(segments, settings, now)
    keep, preserved = bounds.keep(segments, settings)
    if keep.all():
        return segments, []  # the common case: nothing to filter
    skipped: list[Decision] = []
    if explain:
        for i in np.flatnonzero(~keep).tolist():
            reason, detail = _why_out(
                segments[i], settings, now, bool(preserved[i]), bounds.oldest_load, bounds.oldest_data
            )
            skipped.append(Decision(segments[i].id, rule, False, reason, detail))
    return segments.take(keep), skipped


def freed(segments: SegmentColumns, settings: TableSettings, near: Collection[Segment]) -> list[str]:
    """Ids just past the preserved newest loads: new loads push as many out of `preserve_latest`
    (they may merge now), so an attempt near the new loads looks near these too."""
    if not settings.preserve_latest or not near:
        return []
    return segments.newest(settings.preserve_latest + len(near))[: len(near)]


def _why_out(
    segment: Segment,
    settings: TableSettings,
    now: datetime,
    preserved: bool,
    oldest_load: datetime | None,
    oldest_data: datetime | None,
) -> tuple[SkipReason, str]:
    """The first shared filter that keeps `segment` out, and how."""
    if not settings.merge_enabled:
        return SkipReason.MERGE_DISABLED, "merging is disabled for this table"
    if segment.state is not SegmentState.ONLINE:
        return SkipReason.NOT_COMPLETED, f"state is {segment.state}"
    if segment.sub_partition_states:
        busy = ", ".join(f"{v} is {st}" for v, st in segment.sub_partition_states)
        return SkipReason.NOT_COMPLETED, f"sub-partitions not settled: {busy}"
    if preserved:
        return SkipReason.PRESERVED, f"one of the {settings.preserve_latest} most recently loaded segments"
    if oldest_load is not None and segment.loaded_at < oldest_load:
        return (
            SkipReason.TOO_OLD,
            f"loaded {segment.loaded_at.isoformat()}, more than "
            f"{settings.allowed_compaction_days} days before {now.isoformat()}",
        )
    assert oldest_data is not None  # the last filter that can keep a segment out
    return (
        SkipReason.OUTSIDE_LOOKBACK,
        f"data ends {segment.end.isoformat()}, before the lookback of {settings.lookback}",
    )

"""Filters every rule shares: completed only, merge enabled, preserve_latest,
allowed_compaction_days and lookback.

The masks are computed over the table's columns; reasons are written (with
`explain`) only for the segments kept out.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from compactor.config.tables import TableSettings
from compactor.domain.columns import Bools, SegmentColumns, order_by
from compactor.domain.plans import Decision, SkipReason
from compactor.domain.segments import Segment, SegmentState


def shared_filter(
    segments: SegmentColumns, settings: TableSettings, now: datetime, rule: str, explain: bool = True
) -> tuple[SegmentColumns, list[Decision]]:
    """Split `segments` into those `rule` may consider and (if `explain`) decisions for the rest."""
    n = len(segments)
    keep: Bools = segments.settled.copy() if settings.merge_enabled else np.zeros(n, np.bool_)
    preserved = np.zeros(n, np.bool_)
    if settings.preserve_latest and n:
        preserved[order_by(segments.loaded, segments)[-settings.preserve_latest :]] = True
        keep &= ~preserved
    oldest_load = (
        now - timedelta(days=settings.allowed_compaction_days) if settings.allowed_compaction_days else None
    )
    if oldest_load is not None:
        keep &= segments.loaded >= oldest_load.timestamp()
    oldest_data = now - settings.lookback if settings.lookback else None
    if oldest_data is not None:
        keep &= segments.end >= oldest_data.timestamp()
    if keep.all():
        return segments, []  # the common case: nothing to filter
    skipped: list[Decision] = []
    if explain:
        for i in np.flatnonzero(~keep).tolist():
            reason, detail = _why_out(
                segments[i], settings, now, bool(preserved[i]), oldest_load, oldest_data
            )
            skipped.append(Decision(segments[i].id, rule, False, reason, detail))
    return segments.take(keep), skipped


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

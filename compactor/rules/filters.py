"""Filters every rule shares: completed only, merge enabled, preserve_latest,
allowed_compaction_days and lookback."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from operator import attrgetter

from compactor.config.tables import TableSettings
from compactor.domain.plans import Decision, SkipReason
from compactor.domain.segments import Segment, SegmentState

_STATE = attrgetter("state")
_SUB_STATES = attrgetter("sub_partition_states")


def shared_filter(
    segments: Sequence[Segment], settings: TableSettings, now: datetime, rule: str, explain: bool = True
) -> tuple[list[Segment], list[Decision]]:
    """Split `segments` into those `rule` may consider and (if `explain`) decisions for the rest."""
    skipped: list[Decision] = []
    if (
        settings.merge_enabled
        and not settings.preserve_latest
        and not settings.allowed_compaction_days
        and settings.lookback is None
        and set(map(_STATE, segments)) <= {SegmentState.ONLINE}
        and not any(map(_SUB_STATES, segments))
    ):
        return list(segments), skipped  # the common case: nothing to filter

    def skip(segment: Segment, reason: SkipReason, detail: str) -> None:
        if explain:
            skipped.append(Decision(segment.id, rule, False, reason, detail))

    preserved: set[str] = set()
    if settings.preserve_latest:
        newest = sorted(segments, key=lambda s: (s.loaded_at, s.id), reverse=True)
        preserved = {s.id for s in newest[: settings.preserve_latest]}
    oldest_load = (
        now - timedelta(days=settings.allowed_compaction_days) if settings.allowed_compaction_days else None
    )
    oldest_data = now - settings.lookback if settings.lookback else None

    eligible: list[Segment] = []
    for segment in segments:
        if not settings.merge_enabled:
            skip(segment, SkipReason.MERGE_DISABLED, "merging is disabled for this table")
        elif segment.state is not SegmentState.ONLINE:
            skip(segment, SkipReason.NOT_COMPLETED, f"state is {segment.state}")
        elif segment.sub_partition_states:
            busy = ", ".join(f"{v} is {st}" for v, st in segment.sub_partition_states)
            skip(segment, SkipReason.NOT_COMPLETED, f"sub-partitions not settled: {busy}")
        elif segment.id in preserved:
            skip(
                segment,
                SkipReason.PRESERVED,
                f"one of the {settings.preserve_latest} most recently loaded segments",
            )
        elif oldest_load is not None and segment.loaded_at < oldest_load:
            skip(
                segment,
                SkipReason.TOO_OLD,
                f"loaded {segment.loaded_at.isoformat()}, more than "
                f"{settings.allowed_compaction_days} days before {now.isoformat()}",
            )
        elif oldest_data is not None and segment.end < oldest_data:
            skip(
                segment,
                SkipReason.OUTSIDE_LOOKBACK,
                f"data ends {segment.end.isoformat()}, before the lookback of {settings.lookback}",
            )
        else:
            eligible.append(segment)
    return eligible, skipped

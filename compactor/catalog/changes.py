"""What can happen to a table's segment set: the changes the catalog folds.

Each change is a frozen value; `SegmentCatalog.apply` folds one in. Applying
the same change twice is a no-op, so a replayed batch cannot double-count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from compactor.catalog.retired import RetiredSegment
from compactor.domain.plans import MergePlan
from compactor.domain.segments import Segment


@dataclass(frozen=True, slots=True)
class SegmentAdded:
    """A load completed (its event arrived); an id is never reused for other content."""

    segment: Segment


@dataclass(frozen=True, slots=True)
class SegmentUpdated:
    """A known segment gained a sub-partition, or one is being (or was) refreshed."""

    segment: Segment


@dataclass(frozen=True, slots=True)
class PlanApplied:
    """A plan committed: its inputs are replaced by `outputs` (one for a merge, several for a
    refresh that splits). `version` is the Delta commit's, when known."""

    plan: MergePlan
    outputs: tuple[Segment, ...]
    version: int | None = None
    data_change: bool = True


@dataclass(frozen=True, slots=True)
class SegmentsGone:
    """Delta no longer holds these segments' rows: they leave the catalog."""

    table: str
    segment_ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class TableReloaded:
    """A table's view re-read from Delta: these segments win over what events said, and
    these were merged away."""

    table: str
    segments: tuple[Segment, ...]
    retired: tuple[RetiredSegment, ...]


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """What one Delta commit did to the segment set (from its user metadata).

    `op` is load, merge, refresh, sub_partition, sub_partition_delete or purge; `metrics` are the
    commit's operation metrics, which give the segments' true sizes.
    """

    table: str
    version: int
    added: tuple[Segment, ...]
    removed: tuple[str, ...]
    plan_id: str | None = None
    op: str = "load"
    metrics: Mapping[str, int] = field(default_factory=dict)
    rule: str | None = None
    level: str | None = None
    pool: str | None = None
    data_change: bool = True
    committed_at: datetime | None = None  # the commit's time, when read from the table's history

    def sized(self, segment: Segment, before: Segment | None) -> Segment:
        """`segment` with the records and bytes this commit leaves it with."""
        m = self.metrics
        if not m or self.op == "sub_partition_delete":  # a value's rows left: its record is exact
            return segment
        if self.op == "purge" and before is not None:  # the files with deletion vectors rewritten
            size = before.bytes - m.get("numRemovedBytes", 0) + m.get("numAddedBytes", 0)
            return replace(segment, bytes=max(0, size))
        if self.op == "refresh":  # several outputs: the commit's bytes shared by rows
            total = sum(s.records for s in self.added) or 1
            return replace(segment, bytes=m.get("numOutputBytes", 0) * segment.records // total)
        if len(self.added) != 1:
            return segment
        if self.op == "sub_partition":  # a slice of an existing segment was replaced
            base_records, base_bytes = (before.records, before.bytes) if before else (0, 0)
            records = (
                base_records
                - m.get("numDeletedRows", 0)
                + m.get("numOutputRows", 0)
                - m.get("numCopiedRows", 0)
            )
            size = base_bytes - m.get("numRemovedBytes", 0) + m.get("numOutputBytes", 0)
            return replace(segment, records=records, bytes=size)
        if self.op == "merge" and "numOutputRows" not in m:  # an overwrite that wrote no row (upsert)
            return replace(segment, records=0, bytes=0)
        return replace(
            segment,
            records=m.get("numOutputRows", segment.records),
            # delta-rs records no bytes: the load's event told them, or they are not known yet
            bytes=m.get("numOutputBytes", before.bytes if before else segment.bytes),
        )


Change = SegmentAdded | SegmentUpdated | PlanApplied | SegmentsGone | TableReloaded | CommitRecord

"""Live segments per table and the ids merged away, in memory: what a simulation of the planners
needs from a catalog. The job's catalog (`catalog.fold.SegmentCatalog`) adds durability, commit
history and announcements on top of the same two operations: a segment arrives, a plan applies.
"""

from __future__ import annotations

from dataclasses import replace

from compactor.domain.columns import SegmentColumns, TableSegments
from compactor.domain.plans import MergePlan
from compactor.domain.segments import Segment
from compactor.errors import InvalidSegmentError


def arrives_new(known: Segment | None, segment: Segment) -> bool:
    """Whether `segment` is new beside what is `known` under its id: False for the same content
    again (a replayed event), an error for other content under a known id."""
    if known is None:
        return True
    if known.same_content(segment):
        return False
    if known.bytes == 0 and replace(known, bytes=segment.bytes) == segment:
        return True  # its commit was folded first, and it did not tell the bytes (delta-rs)
    if segment.bytes == 0 and replace(segment, bytes=known.bytes) == known:
        return False  # its commit was folded first (it told the bytes), the event does not
    raise InvalidSegmentError(
        f"segment {segment.id} of table {segment.table} is already known with other content"
    )


def updates(known: Segment | None, segment: Segment) -> bool:
    """Whether `segment` changes the `known` description of a live segment (its range may not)."""
    if known is None:
        raise InvalidSegmentError(f"segment {segment.id} of table {segment.table} is not known")
    if known.range != segment.range:
        raise InvalidSegmentError(
            f"segment {segment.id}: time range {segment.range} differs from the known {known.range}"
        )
    return known != segment


class SegmentSet:
    def __init__(self) -> None:
        self._tables: dict[str, TableSegments] = {}
        self._merged_away: dict[str, set[str]] = {}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SegmentSet):
            return NotImplemented
        return self._tables == other._tables and self._merged_away == other._merged_away

    __hash__ = None  # type: ignore[assignment]  # mutable

    @property
    def table_names(self) -> list[str]:
        return list(self._tables)

    def segments(self, table: str) -> list[Segment]:
        return list(self._tables.get(table, {}).values())

    def columns(self, table: str) -> SegmentColumns:
        """The table's segments as columns for the planners (valid until the table changes)."""
        return self._tables.get(table, TableSegments()).columns()

    def get(self, table: str, segment_id: str) -> Segment | None:
        live = self._tables.get(table)
        return None if live is None else live.get(segment_id)

    def knows(self, table: str, segment_id: str) -> bool:
        """True for a live segment and for one merged away."""
        return segment_id in self._tables.get(table, {}) or segment_id in self._merged_away.get(table, ())

    def add(self, segment: Segment) -> bool:
        """A segment arrives; False when it is known already (or merged away) with the same content."""
        if segment.id in self._merged_away.get(segment.table, ()):
            return False
        live = self._tables.setdefault(segment.table, TableSegments())
        if not arrives_new(live.get(segment.id), segment):
            return False
        live[segment.id] = segment
        return True

    def update(self, segment: Segment) -> None:
        """A live segment's description changes (its time range may not)."""
        if updates(self.get(segment.table, segment.id), segment):
            self._tables[segment.table][segment.id] = segment

    def apply(self, plan: MergePlan) -> None:
        """A plan's inputs leave and its output takes their place."""
        live = self._tables.setdefault(plan.table, TableSegments())
        for segment_id in plan.input_ids:
            live.pop(segment_id, None)
            self._merged_away.setdefault(plan.table, set()).add(segment_id)
        live[plan.output.id] = plan.output

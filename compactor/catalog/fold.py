"""The catalog: each table's current segments, one `apply(change)` fold over what happened.

Truth lives in Delta: the executor records every load and merge in the commit's
metadata, and `SegmentCatalog.from_commits` rebuilds this view from the table's
history. This module is pure; reading the history is the Delta layer's job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import singledispatchmethod

from compactor.catalog.changes import (
    Change,
    CommitRecord,
    PlanApplied,
    SegmentAdded,
    SegmentsGone,
    SegmentUpdated,
    TableReloaded,
)
from compactor.domain.plans import MergePlan
from compactor.domain.segments import Segment
from compactor.errors import InvalidSegmentError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExecutedPlan:
    """A plan as its Delta commit recorded it: enough to announce its result again."""

    version: int
    plan: MergePlan
    outputs: tuple[Segment, ...]
    data_change: bool = True


@dataclass
class SegmentCatalog:
    """Current segments per table; applying the same change twice is a no-op."""

    _tables: dict[str, dict[str, Segment]] = field(default_factory=dict)
    _executed: dict[str, set[str]] = field(default_factory=dict)
    # ids merged away: a re-delivered event for one of them is a duplicate, not a new segment
    _retired: dict[str, set[str]] = field(default_factory=dict)
    _history: dict[str, list[ExecutedPlan]] = field(default_factory=dict)  # filled from commits

    # -- queries ----------------------------------------------------------------

    @property
    def table_names(self) -> list[str]:
        return list(self._tables)

    def segments(self, table: str) -> list[Segment]:
        return list(self._tables.get(table, {}).values())

    def get(self, table: str, segment_id: str) -> Segment | None:
        return self._tables.get(table, {}).get(segment_id)

    def knows(self, table: str, segment_id: str) -> bool:
        """True for a current segment and for one already merged away."""
        return segment_id in self._tables.get(table, {}) or self.retired(table, segment_id)

    def retired(self, table: str, segment_id: str) -> bool:
        """True for a segment merged away since it was loaded."""
        return segment_id in self._retired.get(table, set())

    def retired_ids(self, table: str) -> frozenset[str]:
        return frozenset(self._retired.get(table, ()))

    def was_executed(self, table: str, plan_id: str) -> bool:
        return plan_id in self._executed.get(table, set())

    def executed_plans(self, table: str) -> list[ExecutedPlan]:
        """The plans the table's recorded commits executed, oldest first."""
        return list(self._history.get(table, []))

    # -- the fold ---------------------------------------------------------------

    @singledispatchmethod
    def apply(self, change: Change) -> bool:
        """Fold one change in; True when it changed the catalog."""
        raise TypeError(f"not a catalog change: {change!r}")

    @apply.register
    def _(self, change: SegmentAdded) -> bool:
        segment = change.segment
        if self.retired(segment.table, segment.id):
            return False
        known = self._tables.setdefault(segment.table, {}).get(segment.id)
        if known is not None:
            if known.same_content(segment):
                return False
            raise InvalidSegmentError(
                f"segment {segment.id} of table {segment.table} is already known with other content"
            )
        self._tables[segment.table][segment.id] = segment
        return True

    @apply.register
    def _(self, change: SegmentUpdated) -> bool:
        segment = change.segment
        known = self.get(segment.table, segment.id)
        if known is None:
            raise InvalidSegmentError(f"segment {segment.id} of table {segment.table} is not known")
        if known.range != segment.range:
            raise InvalidSegmentError(
                f"segment {segment.id}: time range {segment.range} differs from the known {known.range}"
            )
        if known == segment:
            return False
        self._tables[segment.table][segment.id] = segment
        return True

    @apply.register
    def _(self, change: PlanApplied) -> bool:
        plan = change.plan
        table = self._tables.setdefault(plan.table, {})
        if self.was_executed(plan.table, plan.plan_id) and all(o.id in table for o in change.outputs):
            return False
        for sid in plan.input_ids:
            table.pop(sid, None)
        self._retired.setdefault(plan.table, set()).update(plan.input_ids)
        for segment in change.outputs:
            table[segment.id] = segment
        self._executed.setdefault(plan.table, set()).add(plan.plan_id)
        return True

    @apply.register
    def _(self, change: SegmentsGone) -> bool:
        known = self._tables.setdefault(change.table, {})
        gone = change.segment_ids & set(known)
        for sid in gone:
            log.warning("table %s: segment %s is in the catalog but not in Delta; dropped", change.table, sid)
            del known[sid]
        return bool(gone)

    @apply.register
    def _(self, change: TableReloaded) -> bool:
        known = self._tables.setdefault(change.table, {})
        for segment in change.segments:
            known[segment.id] = segment  # Delta's record wins over what events told us
        self._retired.setdefault(change.table, set()).update(change.retired)
        return True

    @apply.register
    def _(self, record: CommitRecord) -> bool:
        """One commit of the table's Delta history."""
        table = record.table
        segments = self._tables.setdefault(table, {})
        inputs = tuple(segments.get(sid) or _unrecorded(sid, table, record) for sid in record.removed)
        for sid in record.removed:
            segments.pop(sid, None)
        self._retired.setdefault(table, set()).update(record.removed)
        for segment in record.added:
            segments[segment.id] = record.sized(segment, segments.get(segment.id))
        if not record.plan_id:
            return True
        self._executed.setdefault(table, set()).add(record.plan_id)
        outputs = tuple(segments[s.id] for s in record.added)
        if inputs and outputs:
            plan = MergePlan(
                record.plan_id, table, record.rule or record.op, inputs, outputs[0], record.level, record.pool
            )
            executed = ExecutedPlan(record.version, plan, outputs, record.data_change)
            self._history.setdefault(table, []).append(executed)
        return True

    # -- Delta as the truth -----------------------------------------------------

    def reconcile(self, table: str, present_ids: Iterable[str]) -> tuple[set[str], set[str]]:
        """Align with the ids Delta actually holds; return (unknown, gone).

        Known-but-gone segments are dropped. Segments present in Delta but absent
        from the commit metadata are reported for the caller to describe.
        """
        present = set(present_ids)
        gone = set(self._tables.setdefault(table, {})) - present
        self.apply(SegmentsGone(table, frozenset(gone)))
        return present - set(self._tables[table]), gone

    @classmethod
    def from_commits(cls, commits: Mapping[str, Iterable[CommitRecord]]) -> SegmentCatalog:
        """Every table's history folded in order; a table with no commit is known and empty."""
        catalog = cls()
        for table, records in commits.items():
            catalog._tables.setdefault(table, {})
            for record in sorted(records, key=lambda r: r.version):
                catalog.apply(record)
        return catalog


def _unrecorded(segment_id: str, table: str, record: CommitRecord) -> Segment:
    """An input whose load left no compactor metadata (a producer wrote Delta itself):
    its id is certain; its extent is taken from the plan's output."""
    output = record.added[0]
    return Segment(segment_id, table, output.range, loaded_at=output.loaded_at)

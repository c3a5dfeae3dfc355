"""The catalog: each table's current segments, folded from events and commits.

Truth lives in Delta: the executor records every load and merge in the commit's
metadata, and `SegmentCatalog.from_commits` rebuilds this view from the table's
history. This module is pure; reading the history is the executor's job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from compactor.domain import MergePlan, Segment
from compactor.errors import InvalidSegmentError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """What one Delta commit did to the segment set (from its user metadata).

    `op` is load, merge or sub_partition; `metrics` are the commit's operation
    metrics, which give the segments' true sizes.
    """

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

    def sized(self, segment: Segment, before: Segment | None) -> Segment:
        """`segment` with the records and bytes this commit leaves it with."""
        m = self.metrics
        if not m:
            return segment
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
        return replace(
            segment,
            records=m.get("numOutputRows", segment.records),
            bytes=m.get("numOutputBytes", segment.bytes),
        )


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

    tables: dict[str, dict[str, Segment]] = field(default_factory=dict)
    executed_plans: dict[str, set[str]] = field(default_factory=dict)
    # ids merged away: a re-delivered event for one of them is a duplicate, not a new segment
    retired: dict[str, set[str]] = field(default_factory=dict)
    history: dict[str, list[ExecutedPlan]] = field(default_factory=dict)  # filled by from_commits

    def segments(self, table: str) -> list[Segment]:
        return list(self.tables.get(table, {}).values())

    def get(self, table: str, segment_id: str) -> Segment | None:
        return self.tables.get(table, {}).get(segment_id)

    def knows(self, table: str, segment_id: str) -> bool:
        """True for a current segment and for one already merged away."""
        return segment_id in self.tables.get(table, {}) or segment_id in self.retired.get(table, set())

    def was_executed(self, table: str, plan_id: str) -> bool:
        return plan_id in self.executed_plans.get(table, set())

    def add(self, segment: Segment) -> bool:
        """Record a completed segment; False if it was already known (or merged away).

        A different segment under a known id is refused: ids are immutable.
        """
        if segment.id in self.retired.get(segment.table, set()):
            return False
        known = self.tables.setdefault(segment.table, {}).get(segment.id)
        if known is not None:
            if known.same_content(segment):
                return False
            raise InvalidSegmentError(
                f"segment {segment.id} of table {segment.table} is already known with other content"
            )
        self.tables[segment.table][segment.id] = segment
        return True

    def update(self, segment: Segment) -> bool:
        """Replace a known segment's description (a sub-partition added, refreshing, refreshed).

        The id and time range must match; returns False if nothing changed.
        """
        known = self.get(segment.table, segment.id)
        if known is None:
            raise InvalidSegmentError(f"segment {segment.id} of table {segment.table} is not known")
        if known.range != segment.range:
            raise InvalidSegmentError(
                f"segment {segment.id}: time range {segment.range} differs from the known {known.range}"
            )
        if known == segment:
            return False
        self.tables[segment.table][segment.id] = segment
        return True

    def apply_rewrite(self, plan: MergePlan, outputs: Iterable[Segment]) -> None:
        """Replace a plan's inputs with several outputs (a refresh that splits)."""
        table = self.tables.setdefault(plan.table, {})
        for sid in plan.input_ids:
            table.pop(sid, None)
        self.retired.setdefault(plan.table, set()).update(plan.input_ids)
        for segment in outputs:
            table[segment.id] = segment
        self.executed_plans.setdefault(plan.table, set()).add(plan.plan_id)

    def apply_plan(self, plan: MergePlan, output: Segment | None = None) -> None:
        """Replace a plan's inputs with its output (idempotent).

        `output` is the committed segment when its true size is known (from the
        Delta commit); otherwise the plan's predicted output is recorded.
        """
        table = self.tables.setdefault(plan.table, {})
        for sid in plan.input_ids:
            table.pop(sid, None)
        self.retired.setdefault(plan.table, set()).update(plan.input_ids)
        table[plan.output.id] = output or plan.output
        self.executed_plans.setdefault(plan.table, set()).add(plan.plan_id)

    def apply_commit(self, table: str, record: CommitRecord) -> None:
        segments = self.tables.setdefault(table, {})
        inputs = tuple(segments.get(sid) or _unrecorded(sid, table, record) for sid in record.removed)
        for sid in record.removed:
            segments.pop(sid, None)
        self.retired.setdefault(table, set()).update(record.removed)
        for segment in record.added:
            segments[segment.id] = record.sized(segment, segments.get(segment.id))
        if record.plan_id:
            self.executed_plans.setdefault(table, set()).add(record.plan_id)
            outputs = tuple(segments[s.id] for s in record.added)
            if inputs and outputs:
                plan = MergePlan(
                    record.plan_id,
                    table,
                    record.rule or record.op,
                    inputs,
                    outputs[0],
                    record.level,
                    record.pool,
                )
                executed = ExecutedPlan(record.version, plan, outputs, record.data_change)
                self.history.setdefault(table, []).append(executed)

    def reconcile(self, table: str, present_ids: Iterable[str]) -> tuple[set[str], set[str]]:
        """Align with the ids Delta actually holds; return (unknown, gone).

        Known-but-gone segments are dropped. Segments present in Delta but absent
        from the commit metadata are reported for the caller to describe.
        """
        present = set(present_ids)
        known = self.tables.setdefault(table, {})
        gone = set(known) - present
        for sid in gone:
            log.warning("table %s: segment %s is in the catalog but not in Delta; dropped", table, sid)
            del known[sid]
        return present - set(known), gone

    @classmethod
    def from_commits(cls, commits: Mapping[str, Iterable[CommitRecord]]) -> SegmentCatalog:
        catalog = cls()
        for table, records in commits.items():
            catalog.tables.setdefault(table, {})
            for record in sorted(records, key=lambda r: r.version):
                catalog.apply_commit(table, record)
        return catalog


def _unrecorded(segment_id: str, table: str, record: CommitRecord) -> Segment:
    """An input whose load left no compactor metadata (a producer wrote Delta itself):
    its id is certain; its extent is taken from the plan's output."""
    output = record.added[0]
    return Segment(segment_id, table, output.range, loaded_at=output.loaded_at)

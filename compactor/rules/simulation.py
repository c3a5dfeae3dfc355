"""Replay arrivals through the planners exactly as the streaming job would, minus I/O.

Each arrival triggers one attempt for its table; every merge applied triggers
another attempt (its completion event in the stream), until nothing merges.
Pure: used by `compactor plan`, the property tests and the benchmarks.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from compactor.config.tables import ProjectConfig
from compactor.domain.columns import SegmentColumns
from compactor.domain.plans import MergePlan
from compactor.domain.segment_set import SegmentSet
from compactor.domain.segments import Segment
from compactor.errors import InvalidSegmentError
from compactor.rules import manual
from compactor.rules.budget import WriteLedger
from compactor.rules.engine import Evaluation, evaluate, near_after
from compactor.rules.late_data import late_mask, refusal, sealing_rule

# Every merge removes at least one segment, so a cascade is bounded by the
# segment count; this cap only guards against a planner bug looping forever.
_MAX_ATTEMPTS_PER_SEGMENT = 4


@dataclass
class Simulation:
    """The segments (in memory, as the job's catalog would hold them) plus the merges applied to
    them, in order."""

    config: ProjectConfig
    catalog: SegmentSet = field(default_factory=SegmentSet)
    merges: list[MergePlan] = field(default_factory=list)
    local: bool = False  # attempts look only near the segment that triggered them, as the stream's do
    writes: WriteLedger = field(default_factory=WriteLedger)  # for write-amplification budgets

    def attempt(
        self, table: str, now: datetime, only_rule: str | None = None, near: Collection[Segment] | None = None
    ) -> Evaluation:
        """One evaluation; its plans are applied."""
        settings = self.config.for_table(table)
        evaluation = evaluate(
            table,
            self.catalog.columns(table),
            settings,
            now,
            only_rule=only_rule,
            near=near if self.local else None,
            allowance=self.writes.allowance(table, now, settings.max_write_amplification),
        )
        for plan in evaluation.plans:
            self.catalog.apply(plan)
            self.merges.append(plan)
            self.writes.rewritten(table, now, plan.bytes_in)
        return evaluation

    def cascade(
        self, table: str, now: datetime, first: Evaluation | None = None, near: tuple[Segment, ...] = ()
    ) -> None:
        """Attempt, and attempt again once per applied merge, until quiet. A follow-up looks near
        the merge's output and near what the attempt that planned it looked at; after a full
        attempt, or a merge that changes more than its neighbourhood (`near_after`), it is full
        too (more may wait anywhere)."""
        pending: deque[tuple[Segment, ...]] = (
            deque((p.output,) for p in first.plans) if first else deque([near])
        )
        budget = _MAX_ATTEMPTS_PER_SEGMENT * (len(self.catalog.segments(table)) + 1)
        while pending:
            budget -= 1
            if budget < 0:
                raise RuntimeError(f"table {table}: merges did not settle; a planner is looping")
            looked = pending.popleft()
            evaluation = self.attempt(table, now, near=looked or None)
            narrow = bool(looked) and near_after(evaluation.plans)
            pending.extend((*looked, p.output) if narrow else () for p in evaluation.plans)

    def arrive(self, segment: Segment, now: datetime | None = None) -> None:
        """A completion event for `segment`: record it and run the cascade."""
        self.catalog.add(segment)
        self.writes.ingested(segment.table, now or segment.loaded_at, segment.bytes)
        self.cascade(segment.table, now or segment.loaded_at, near=(segment,))

    def manual_merge(self, table: str, ids: Sequence[str]) -> MergePlan:
        """Validate and apply a merge of exactly `ids` (ManualMergeError if invalid)."""
        plan = manual.plan(table, ids, self.catalog.segments(table), self.config.for_table(table))
        self.catalog.apply(plan)
        self.merges.append(plan)
        return plan


def check_segments(segments: Iterable[Segment], config: ProjectConfig) -> None:
    """Refuse duplicate ids, and overlaps in tables whose rules need disjoint ranges."""
    seen: dict[tuple[str, str], Segment] = {}
    by_table: dict[str, list[Segment]] = {}
    for s in segments:
        if (s.table, s.id) in seen:
            raise InvalidSegmentError(f"segment {s.id} of table {s.table} appears twice")
        seen[(s.table, s.id)] = s
        by_table.setdefault(s.table, []).append(s)
    for table, members in by_table.items():
        settings = config.for_table(table)
        if not settings.needs_disjoint_ranges:
            continue
        sealing = sealing_rule(settings.rules)
        if sealing is not None:  # overlaps are late data; the rest is disjoint by construction
            columns = SegmentColumns.of(members)
            for s in columns.pick(np.flatnonzero(late_mask(columns))):
                why = refusal(s, sealing)
                if why:
                    raise InvalidSegmentError(
                        f"segment {s.id} {s.range} of table {table} overlaps others: {why}"
                    )
            continue
        ordered = sorted(members, key=lambda s: (s.start, s.end))
        for prev, nxt in itertools.pairwise(ordered):
            if nxt.start < prev.end:
                raise InvalidSegmentError(
                    f"segment {nxt.id} {nxt.range} overlaps {prev.id} {prev.range} in table {table}, "
                    "whose rules need disjoint time ranges"
                )

"""Level-threshold (minor) compaction, as Apache CarbonData compacts its loads.

Every x not-yet-compacted segments, in load order, merge into one level-1
segment; every y level-1 segments merge into one level-2 segment. Level-2
segments are final for this rule. A threshold of 0 disables its level.

Near new segments (`at_levels`): on a table where nothing waited to merge, new
segments can complete a group only at their own levels, so only those are looked at.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from compactor.config.rules import MinorRule, RuleName
from compactor.domain.columns import SegmentColumns, order_by
from compactor.domain.plans import Decision, MergePlan, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment

RULE = RuleName.MINOR
FINAL_LEVEL = 2


def _load_order(columns: SegmentColumns, level: int) -> list[Segment]:
    """The segments at `level`, oldest load first (ties by id)."""
    at_level = columns.take(columns.level == level)
    return at_level.pick(order_by(at_level.loaded, at_level))


def at_levels(columns: SegmentColumns, levels: Collection[int]) -> SegmentColumns:
    """The segments at `levels` (the new segments' own)."""
    if len(levels) == 1:  # the usual case: one comparison per segment, not a set lookup
        return columns.take(columns.level == next(iter(levels)))
    return columns.take(np.isin(columns.level, list(levels)))


def plan(segments: Sequence[Segment], rule: MinorRule, table: str, explain: bool = True) -> RuleOutcome:
    columns = SegmentColumns.of(segments)
    plans: list[MergePlan] = []
    decisions: list[Decision] = []  # only built with `explain`: the stream needs plans alone
    for level, threshold in enumerate(rule.level_thresholds):
        candidates = _load_order(columns, level) if threshold or explain else []
        if threshold == 0:
            decisions += _skipped(candidates, SkipReason.BELOW_LEVEL_COUNT, f"level {level + 1} is disabled")
            continue
        full = len(candidates) - len(candidates) % threshold
        for i in range(0, full, threshold):
            group = candidates[i : i + threshold]
            merge = make_plan(table, RULE, group, level=f"level-{level + 1}", output_level=level + 1)
            plans.append(merge)
            if explain:
                detail = f"{threshold} level-{level} segments -> level {level + 1}"
                decisions += [Decision(s.id, RULE, True, None, detail, merge.plan_id) for s in group]
        if explain:
            waiting = f"{len(candidates) - full} of {threshold} level-{level} segments so far"
            decisions += _skipped(candidates[full:], SkipReason.BELOW_LEVEL_COUNT, waiting)
    if not explain:
        return RuleOutcome(tuple(plans))
    final = columns.pick(np.flatnonzero(columns.level >= FINAL_LEVEL))
    decisions += [
        Decision(s.id, RULE, False, SkipReason.FINAL_LEVEL, f"level {s.level} segments are not merged again")
        for s in final
    ]
    return RuleOutcome(tuple(plans), tuple(decisions))


def _skipped(segments: Sequence[Segment], reason: SkipReason, detail: str) -> list[Decision]:
    return [Decision(s.id, RULE, False, reason, detail) for s in segments]

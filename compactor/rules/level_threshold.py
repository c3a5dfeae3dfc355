"""Level-threshold (minor) compaction (seed 002, Apache CarbonData).

Every x not-yet-compacted segments, in load order, merge into one level-1
segment; every y level-1 segments merge into one level-2 segment. Level-2
segments are final for this rule. A threshold of 0 disables its level.
"""

from __future__ import annotations

from collections.abc import Sequence

from compactor.config import MinorRule
from compactor.domain import Decision, MergePlan, RuleOutcome, Segment, SkipReason, make_plan

RULE = "minor"
FINAL_LEVEL = 2


def _load_order(segments: Sequence[Segment]) -> list[Segment]:
    return sorted(segments, key=lambda s: (s.loaded_at, s.id))


def plan(segments: Sequence[Segment], rule: MinorRule, table: str, explain: bool = True) -> RuleOutcome:
    plans: list[MergePlan] = []
    decisions: list[Decision] = []
    for level, threshold in enumerate(rule.level_thresholds):
        candidates = _load_order([s for s in segments if s.level == level])
        if threshold == 0 and not explain:
            continue
        if threshold == 0:
            decisions += [
                Decision(s.id, RULE, False, SkipReason.BELOW_LEVEL_COUNT, f"level {level + 1} is disabled")
                for s in candidates
            ]
            continue
        full = len(candidates) - len(candidates) % threshold
        for i in range(0, full, threshold):
            group = candidates[i : i + threshold]
            merge = make_plan(table, RULE, group, level=f"level-{level + 1}", output_level=level + 1)
            plans.append(merge)
            if not explain:
                continue
            decisions += [
                Decision(
                    s.id,
                    RULE,
                    True,
                    None,
                    f"{threshold} level-{level} segments -> level {level + 1}",
                    merge.plan_id,
                )
                for s in group
            ]
        if not explain:
            continue
        decisions += [
            Decision(
                s.id,
                RULE,
                False,
                SkipReason.BELOW_LEVEL_COUNT,
                f"{len(candidates) - full} of {threshold} level-{level} segments so far",
            )
            for s in candidates[full:]
        ]
    if not explain:
        return RuleOutcome(tuple(plans))
    decisions += [
        Decision(s.id, RULE, False, SkipReason.FINAL_LEVEL, f"level {s.level} segments are not merged again")
        for s in segments
        if s.level >= FINAL_LEVEL
    ]
    return RuleOutcome(tuple(plans), tuple(decisions))

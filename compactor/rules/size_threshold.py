"""Size-threshold (major) compaction (seed 002, Apache CarbonData).

Walk the eligible segments oldest first with a running total; a segment that
would bring the total to or above `size_threshold` is skipped and the walk goes
on (the seed's prose; CarbonData's code stops at the first overflow). All the
collected segments, at least two, merge into one.
"""

from __future__ import annotations

from collections.abc import Sequence

from compactor.config.rules import MajorRule, RuleName
from compactor.domain.plans import Decision, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment

RULE = RuleName.MAJOR


def plan(segments: Sequence[Segment], rule: MajorRule, table: str, explain: bool = True) -> RuleOutcome:
    collected: list[Segment] = []
    skipped: list[Decision] = []
    total = 0
    for s in sorted(segments, key=lambda s: (s.loaded_at, s.id)):
        if total + s.bytes >= rule.size_threshold:
            if not explain:
                continue
            skipped.append(
                Decision(
                    s.id,
                    RULE,
                    False,
                    SkipReason.ABOVE_SIZE_THRESHOLD,
                    f"{total} + {s.bytes} bytes would reach the threshold {rule.size_threshold}",
                )
            )
            continue
        collected.append(s)
        total += s.bytes
    if len(collected) < 2:
        if not explain:
            return RuleOutcome()
        alone = [
            Decision(
                s.id,
                RULE,
                False,
                SkipReason.NOTHING_TO_MERGE_WITH,
                "no other segment fits under the threshold",
            )
            for s in collected
        ]
        return RuleOutcome((), tuple(skipped + alone))
    merge = make_plan(table, RULE, collected)
    if not explain:
        return RuleOutcome((merge,))
    chosen = [Decision(s.id, RULE, True, None, f"{total} bytes in total", merge.plan_id) for s in collected]
    return RuleOutcome((merge,), tuple(chosen + skipped))

"""Upsert compaction (seed 004, Apache Pinot).

A row is invalid when its key has a row with a higher comparison value (ties:
the later load wins). Segments whose invalid rows reach both thresholds are
rewritten without them and merged M:1 in load order, each output's valid rows
staying within `max_records_per_segment`. One segment alone is still rewritten:
dropping its invalid rows is the work. Counting invalid rows needs the data, so
the caller passes the counts in (`invalid`), computed by the executor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from compactor.config import UpsertCompactionRule
from compactor.domain import Decision, MergePlan, RuleOutcome, Segment, SkipReason, make_plan

RULE = "upsert_compaction"


def qualifies(segment: Segment, invalid: int, rule: UpsertCompactionRule) -> bool:
    if segment.records <= 0 or invalid < rule.invalid_records_threshold_count:
        return False
    return 100.0 * invalid / segment.records >= rule.invalid_records_threshold_percent


def plan(
    segments: Sequence[Segment],
    rule: UpsertCompactionRule,
    table: str,
    invalid: Mapping[str, int] | None,
    explain: bool = True,
) -> RuleOutcome:
    decisions: list[Decision] = []
    if invalid is None:
        if explain:
            decisions = [
                Decision(s.id, RULE, False, SkipReason.NO_STATISTICS, "invalid-row counts not computed")
                for s in segments
            ]
        return RuleOutcome((), tuple(decisions))
    groups: list[list[Segment]] = []
    valid_in_group = 0
    for s in sorted(segments, key=lambda s: (s.loaded_at, s.id)):
        bad = invalid.get(s.id, 0)
        if not qualifies(s, bad, rule):
            if explain:
                decisions.append(
                    Decision(
                        s.id,
                        RULE,
                        False,
                        SkipReason.BELOW_INVALID_THRESHOLD,
                        f"{bad} of {s.records} rows invalid; thresholds {rule.invalid_records_threshold_count} rows "
                        f"and {rule.invalid_records_threshold_percent}%",
                    )
                )
            continue
        valid = s.records - bad
        if not groups or valid_in_group + valid > rule.max_records_per_segment:
            groups.append([])
            valid_in_group = 0
        groups[-1].append(s)
        valid_in_group += valid
    plans: list[MergePlan] = []
    for group in groups:
        merge = make_plan(table, RULE, group, allow_single=True)
        plans.append(merge)
        if explain:
            decisions += [
                Decision(s.id, RULE, True, None, f"{invalid.get(s.id, 0)} invalid rows", merge.plan_id)
                for s in group
            ]
    return RuleOutcome(tuple(plans), tuple(decisions))

"""Evaluate a table's rules in their listed order; a segment is claimed once.

This is the single entry point the streaming handler and the dry-run CLI share,
so a merge planned in the stream is the one `compactor plan` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter

from compactor.config import (
    AutoMergeRule,
    MajorRule,
    MinorRule,
    RefreshRule,
    RuleConfig,
    TableSettings,
    UpsertCompactionRule,
)
from compactor.domain import Decision, MergePlan, RuleOutcome, Segment, SkipReason
from compactor.rules import auto_merge, level_threshold, pools, refresh, size_threshold, upsert
from compactor.rules.filters import shared_filter

_RANGE = attrgetter("range")
_START_TS = attrgetter("start_ts")


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The plans of one attempt and every rule's decision for every segment."""

    table: str
    plans: tuple[MergePlan, ...]
    decisions: tuple[Decision, ...]


def _run_rule(
    rule: RuleConfig,
    eligible: Sequence[Segment],
    table: str,
    all_segments: Sequence[Segment],
    now: datetime,
    explain: bool,
    invalid_counts: Mapping[str, int] | None,
    settings: TableSettings,
    index_facts: Mapping[str, refresh.IndexFacts] | None,
) -> RuleOutcome:
    if isinstance(rule, AutoMergeRule):
        first = min(map(_START_TS, map(_RANGE, all_segments)), default=None)
        return auto_merge.plan(eligible, rule, table, first, explain)
    if isinstance(rule, MinorRule):
        return level_threshold.plan(eligible, rule, table, explain)
    if isinstance(rule, MajorRule):
        return size_threshold.plan(eligible, rule, table, explain)
    if isinstance(rule, UpsertCompactionRule):
        return upsert.plan(eligible, rule, table, invalid_counts, explain)
    if isinstance(rule, RefreshRule):
        return refresh.plan(eligible, rule, table, settings.layout, index_facts, explain)
    return pools.plan(eligible, rule, table, now, explain)


def evaluate(
    table: str,
    segments: Sequence[Segment],
    settings: TableSettings,
    now: datetime,
    trigger: str = "on_load",
    only_rule: str | None = None,
    explain: bool = True,
    invalid_counts: Mapping[str, int] | None = None,
    index_facts: Mapping[str, refresh.IndexFacts] | None = None,
) -> Evaluation:
    """One attempt for `table`.

    With `only_rule`, that rule alone runs whatever its trigger; otherwise the
    rules whose trigger is `trigger` run in the listed order. With `explain`
    off (the streaming hot path) the plans are the same but no per-segment
    decisions are built. `invalid_counts` (invalid rows per segment id) feeds
    upsert compaction, which cannot plan without them; `index_facts` (what the
    index check found per segment) feeds the refresh rule.
    """
    rules = [r for r in settings.rules if (r.rule == only_rule if only_rule else r.trigger == trigger)]
    plans: list[MergePlan] = []
    decisions: list[Decision] = []
    claimed: dict[str, str] = {}
    for rule in rules:
        eligible, skipped = shared_filter(segments, settings, now, rule.rule, explain)
        decisions.extend(skipped)
        free = eligible
        if claimed:
            free = [s for s in eligible if s.id not in claimed]
            if explain:
                decisions += [
                    Decision(s.id, rule.rule, False, SkipReason.CLAIMED, f"in plan {claimed[s.id]}")
                    for s in eligible
                    if s.id in claimed
                ]
        outcome = _run_rule(rule, free, table, segments, now, explain, invalid_counts, settings, index_facts)
        decisions.extend(outcome.decisions)
        for p in outcome.plans:
            claimed.update({sid: p.plan_id for sid in p.input_ids})
            plans.append(p)
    return Evaluation(table, tuple(plans), tuple(decisions))

"""Evaluate a table's rules in their listed order; a segment is claimed once.

This is the single entry point the streaming handler and the dry-run CLI share,
so a merge planned in the stream is the one `compactor plan` prints.

An attempt may be told which segments its triggering events brought (`near`):
each rule then looks only where those segments could make a merge newly qualify
(time layers: their buckets; bin packing: their bins; level thresholds: their
levels; size threshold: the walk from the first of them; upsert: the segments whose
counts they changed and the small ones; refresh: them and their time buckets), and
the shared filters are applied to what it looks at. New loads push as many older ones
out of `preserve_latest`; those are looked near too. On a table that was settled
before those events the plans are a full evaluation's (property-tested); since time
layers make one merge per attempt, the attempts that follow one which planned must
look near the same segments again. A size-threshold merge is the exception: taking its
inputs out changes the walk wherever they were, so the attempt after one looks at the
whole table (`near_after`). Plans waiting elsewhere (after a cool-down, or as time moves
segments past a filter) wait for the next full evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import numpy.typing as npt

from compactor.config.rules import AutoMergeRule, MinorRule, RuleConfig, RuleName
from compactor.config.tables import TableSettings
from compactor.domain.columns import SegmentColumns
from compactor.domain.layout import IndexFacts
from compactor.domain.plans import Decision, MergePlan, RuleOutcome, SkipReason
from compactor.domain.segments import Segment
from compactor.rules.budget import admit
from compactor.rules.filters import Boundaries, freed, shared_filter
from compactor.rules.registry import NARROWERS, PLANNERS, Around, RuleInput


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The plans of one attempt and every rule's decision for every segment."""

    table: str
    plans: tuple[MergePlan, ...]
    decisions: tuple[Decision, ...]
    waiting: tuple[MergePlan, ...] = ()  # ready too, left for later attempts (see RuleOutcome)

    @property
    def ready(self) -> tuple[MergePlan, ...]:
        """Every merge the rules would make now: the table's merge debt."""
        return self.plans + self.waiting


def evaluate(
    table: str,
    segments: Sequence[Segment],
    settings: TableSettings,
    now: datetime,
    trigger: str = "on_load",
    only_rule: str | None = None,
    explain: bool = True,
    invalid_counts: Mapping[str, int] | None = None,
    index_facts: Mapping[str, IndexFacts] | None = None,
    near: Collection[Segment] | None = None,
    allowance: float | None = None,
    running: Mapping[str, str] | None = None,
) -> Evaluation:
    """One attempt for `table`.

    With `only_rule`, that rule alone runs whatever its trigger; otherwise the
    rules whose trigger is `trigger` run in the listed order. With `explain`
    off (the streaming hot path) the plans are the same but no per-segment
    decisions are built. `invalid_counts` (invalid rows per segment id) feeds
    upsert compaction, which cannot plan without them; `index_facts` (what the
    index check found per segment) feeds the refresh rule. `near`: see the module.
    `allowance`: bytes the table's write-amplification budget has left (`budget`).
    `running`: segments in merges in flight (segment id -> plan id): taken, as if an earlier
    rule's plans had claimed them, so no plan shares a segment with a running one. Time
    layers merge one at a time instead: while one of the table's merges runs, what they
    would merge waits (it is debt), since the largest bucket the running merge completes
    may take the rest at once (a week merged now would be rewritten by its month).
    """
    rules = [r for r in settings.rules if (r.rule == only_rule if only_rule else r.trigger == trigger)]
    segments = SegmentColumns.of(segments)  # the catalog's view as it is; a list is encoded once
    offline = _offline(table, segments, settings, rules, explain)
    if offline is not None:
        return offline
    plans, waiting, decisions = list[MergePlan](), list[MergePlan](), list[Decision]()
    claimed: dict[str, str] = dict(running or {})
    bounds = Boundaries.of(segments, settings, now)
    if near is not None:  # the loads pushed out of preserve_latest by the new ones may merge now
        near = (*near, *segments.pick(segments.positions(freed(segments, settings, near))))
    for rule in rules:
        one_at_a_time = isinstance(rule, AutoMergeRule) and bool(running)  # alone on its table
        taken = {} if one_at_a_time else claimed
        scope = segments
        if near is not None:
            around = Around(segments, near, settings, invalid_counts, _passes(bounds, settings, taken))
            scope = NARROWERS[RuleName(rule.rule)](rule, around)
        eligible, skipped = shared_filter(scope, settings, now, rule.rule, explain, bounds)
        decisions += skipped + (_claimed(eligible, taken, rule.rule) if explain and taken else [])
        free = eligible.without(taken)
        given = RuleInput(table, free, segments, settings, now, explain, invalid_counts, index_facts, near)
        outcome = PLANNERS[RuleName(rule.rule)](rule, given)
        if one_at_a_time:
            outcome = _after_running(outcome, running or {})
        elif isinstance(rule, MinorRule) and running:
            outcome = _after_lower_levels(outcome, segments, running)
        if allowance is not None:  # a write-amplification budget: optional merges may wait
            outcome, allowance = _within_budget(outcome, rule, allowance)
        decisions = _claim(outcome, claimed, plans, decisions, explain)
        waiting += outcome.waiting
    return Evaluation(table, tuple(plans), tuple(decisions), tuple(waiting))


def near_after(plans: Sequence[MergePlan]) -> bool:
    """Whether the attempts after `plans` may look near their outputs (and where they looked):
    not after a size-threshold merge, whose inputs leaving frees room in the walk anywhere."""
    return all(p.rule != RuleName.MAJOR for p in plans)


def _passes(
    bounds: Boundaries, settings: TableSettings, taken: Mapping[str, str]
) -> Callable[[SegmentColumns], npt.NDArray[np.bool_]]:
    """Per segment of a view: whether a rule may consider it (the shared filters, not taken)."""

    def passes(view: SegmentColumns) -> npt.NDArray[np.bool_]:
        keep, _ = bounds.keep(view, settings)
        return keep & ~view.mask(taken) if taken else keep

    return passes


def _claim(
    outcome: RuleOutcome,
    claimed: dict[str, str],
    plans: list[MergePlan],
    decisions: list[Decision],
    explain: bool,
) -> list[Decision]:
    """A rule's plans taken in order (their inputs claimed, added to `plans`); a table-wide
    rewrite waits for the plans before it. The decisions so far, with the rule's."""
    dropped: set[str] = set()  # plans that must wait
    kept_out: dict[str, Decision] = {}  # why the filters would have kept a rewritten segment out
    for p in outcome.plans:
        if p.table_wide and claimed:  # it rewrites everything: it waits for the plans before it
            dropped.add(p.plan_id)
            decisions += _waiting(p, claimed) if explain else []
            continue
        if p.table_wide:
            kept_out = {
                d.segment_id: d for d in decisions if d.segment_id in set(p.input_ids) and not d.chosen
            }
            decisions = [d for d in decisions if d.segment_id not in kept_out]
        claimed.update({sid: p.plan_id for sid in p.input_ids})
        plans.append(p)
    return decisions + [_although(d, kept_out) for d in outcome.decisions if d.plan_id not in dropped]


def _after_running(outcome: RuleOutcome, running: Mapping[str, str]) -> RuleOutcome:
    """A time-layer outcome while one of the table's merges runs: its plans wait (as debt)."""
    busy = ", ".join(sorted(set(running.values())))
    detail = f"time layers merge one at a time: waits for the running merge {busy}"
    return _waiting_for(outcome, lambda plan: True, SkipReason.ONE_MERGE_PER_ATTEMPT, detail)


def _after_lower_levels(
    outcome: RuleOutcome, segments: SegmentColumns, running: Mapping[str, str]
) -> RuleOutcome:
    """A minor outcome while merges that make level L run: its plans of level-L segments wait,
    so each level groups its segments in load order once they all exist (merges run side by
    side may commit out of order, and a level would pair outputs that are not neighbours)."""
    making = {s.level + 1: running[s.id] for s in segments.pick(np.flatnonzero(segments.mask(running)))}

    def waits(plan: MergePlan) -> bool:
        return plan.inputs[0].level in making

    levels = ", ".join(f"level {lv} (merge {p})" for lv, p in sorted(making.items()))
    return _waiting_for(
        outcome, waits, SkipReason.LEVEL_IN_FLIGHT, f"waits for the running merges that make {levels}"
    )


def _waiting_for(
    outcome: RuleOutcome, waits: Callable[[MergePlan], bool], reason: SkipReason, detail: str
) -> RuleOutcome:
    """The outcome with the plans `waits` picks left for later (as debt), their decisions saying why."""
    held = {p.plan_id for p in outcome.plans if waits(p)}
    if not held:
        return outcome
    decisions = tuple(
        replace(d, chosen=False, reason=reason, detail=detail, plan_id=None)
        if d.chosen and d.plan_id in held
        else d
        for d in outcome.decisions
    )
    plans = tuple(p for p in outcome.plans if p.plan_id not in held)
    waiting = tuple(p for p in outcome.plans if p.plan_id in held)
    alternatives = outcome.alternatives if plans else ()  # nothing planned: nothing to make instead
    return replace(
        outcome,
        plans=plans,
        decisions=decisions,
        waiting=outcome.waiting + waiting,
        alternatives=alternatives,
    )


def _claimed(eligible: Sequence[Segment], claimed: Mapping[str, str], rule: str) -> list[Decision]:
    return [
        Decision(s.id, rule, False, SkipReason.CLAIMED, f"in plan {claimed[s.id]}")
        for s in eligible
        if s.id in claimed
    ]


def _within_budget(outcome: RuleOutcome, rule: RuleConfig, allowance: float) -> tuple[RuleOutcome, float]:
    """The rule's plans with the optional ones that do not fit `allowance` deferred, and the
    allowance left. A rule that makes one merge per attempt makes the first that fits."""
    one_per_attempt = bool(outcome.waiting) or isinstance(rule, AutoMergeRule)
    admitted = admit((*outcome.plans, *outcome.waiting, *outcome.alternatives), rule, allowance)
    if not admitted.deferred:
        return outcome, allowance - sum(p.bytes_in for p in outcome.plans)
    kept: list[MergePlan] = []  # what is admitted, no two plans sharing a segment
    for p in admitted.kept:
        if not any(set(p.input_ids) & set(k.input_ids) for k in kept):
            kept.append(p)
    plans, waiting = (kept[:1], kept[1:]) if one_per_attempt else (kept, [])
    chosen = {sid: p for p in plans for sid in p.input_ids}
    deferred = {sid: p for p in admitted.deferred for sid in p.input_ids}
    decisions = [_budget_decision(d, chosen, deferred, allowance) for d in outcome.decisions]
    left = allowance - sum(p.bytes_in for p in plans)
    return RuleOutcome(tuple(plans), tuple(decisions), tuple(waiting)), left


def _budget_decision(
    decision: Decision, chosen: Mapping[str, MergePlan], deferred: Mapping[str, MergePlan], allowance: float
) -> Decision:
    """A decision redone after the budget: inputs of a deferred plan wait; a plan made
    instead of it is chosen."""
    sid = decision.segment_id
    if sid in chosen:
        if decision.chosen and decision.plan_id == chosen[sid].plan_id:
            return decision
        detail = "the first merge within the write-amplification budget"
        return Decision(sid, decision.rule, True, None, detail, chosen[sid].plan_id)
    if sid in deferred:
        plan = deferred[sid]
        detail = (
            f"optional {plan.level or plan.pool or 'merge'} {plan.plan_id} rewrites {plan.bytes_in} bytes; "
            f"the write-amplification budget has {max(0.0, allowance):.0f} left"
            if allowance > -math.inf
            else "the job is behind its events: optional merges wait"
        )
        return Decision(sid, decision.rule, False, SkipReason.WA_BUDGET, detail)
    return decision


def _although(decision: Decision, kept_out: Mapping[str, Decision]) -> Decision:
    """A table-wide rewrite replaces every segment, those the shared filters keep out too: say so."""
    filtered = kept_out.get(decision.segment_id)
    if filtered is None:
        return decision
    detail = f"{decision.detail} (Delta has one schema), although {filtered.reason}: {filtered.detail}"
    return replace(decision, detail=detail)


def _waiting(plan: MergePlan, claimed: Mapping[str, str]) -> list[Decision]:
    busy = sorted(set(claimed.values()))
    return [
        Decision(s.id, plan.rule, False, SkipReason.CLAIMED, f"the table-wide rewrite waits for plans {busy}")
        for s in plan.inputs
        if s.id not in claimed
    ]


def _offline(
    table: str,
    segments: Sequence[Segment],
    settings: TableSettings,
    rules: Sequence[RuleConfig],
    explain: bool,
) -> Evaluation | None:
    """No plans for an offline table, each segment told why."""
    reason = offline_reason(settings, segments)
    if reason is None:
        return None
    skipped = [
        Decision(s.id, r.rule, False, SkipReason.SUB_PARTITIONING_OFF, reason)
        for r in rules
        for s in segments
    ]
    return Evaluation(table, (), tuple(skipped) if explain else ())


def offline_reason(settings: TableSettings, segments: Sequence[Segment]) -> str | None:
    """Why the table is offline, or None: multi-level partitioning turned off while segments
    still hold sub-partition values (Kylin's multi-level partitions)."""
    sub = settings.sub_partition
    if sub is None or sub.enabled:
        return None
    holding = sum(1 for s in segments if s.sub_partitions)
    if not holding:
        return None
    return (
        f"table offline: multi-level partitioning is off but {holding} segment(s) hold {sub.column} values; "
        "delete them (compactor subpartitions delete) or turn it back on (sub_partition.enabled: true)"
    )

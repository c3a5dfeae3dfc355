"""Every rule's planner, by name: the one place a new rule is wired in.

A rule is a config model (`config.rules`), a planner module here, and one
entry below. Each entry adapts the engine's uniform call to the planner's own
arguments, so planners keep small, explicit signatures their tests call directly.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from compactor.config.rules import (
    AutoMergeRule,
    BinPackRule,
    MajorRule,
    MinorRule,
    RefreshRule,
    RuleConfig,
    RuleName,
    UpsertCompactionRule,
)
from compactor.config.tables import TableSettings
from compactor.domain.columns import SegmentColumns
from compactor.domain.layout import IndexFacts
from compactor.domain.plans import RuleOutcome
from compactor.domain.segments import Segment
from compactor.rules import auto_merge, level_threshold, pools, refresh, size_threshold, upsert
from compactor.rules.late_data import LateData, watermark


@dataclass(frozen=True, slots=True)
class RuleInput:
    """What one rule sees in one attempt: the segments it may plan, and the table around them."""

    table: str
    eligible: SegmentColumns  # passed the shared filters and not claimed by an earlier rule
    all_segments: SegmentColumns
    settings: TableSettings
    now: datetime
    explain: bool
    invalid_counts: Mapping[str, int] | None = None  # upsert tables: superseded rows per segment
    index_facts: Mapping[str, IndexFacts] | None = None  # refresh: what the index check found
    near: Collection[Segment] | None = None  # the segments the triggering events brought (None: all)


Planner = Callable[[RuleConfig, RuleInput], RuleOutcome]


def _auto_merge(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, AutoMergeRule)
    starts = given.all_segments.start
    first = float(starts.min()) if len(starts) else None
    near = None if given.settings.preserve_latest else given.near  # a new load may free a preserved one
    eligible = given.eligible if near is None else auto_merge.around(given.eligible, near, rule)
    late = None
    if rule.sealing is not None:  # a late run lies in one bucket: near an event, its buckets hold it
        everything = given.all_segments if near is None else auto_merge.around(given.all_segments, near, rule)
        late = LateData.of(everything, rule, watermark(given.all_segments, rule.sealing))
    return auto_merge.plan(eligible, rule, given.table, first, given.explain, late)


def _minor(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, MinorRule)
    eligible = given.eligible
    if given.near is not None and not given.settings.preserve_latest:
        eligible = level_threshold.at_levels(eligible, {s.level for s in given.near})
    return level_threshold.plan(eligible, rule, given.table, given.explain)


def _major(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, MajorRule)
    return size_threshold.plan(given.eligible, rule, given.table, given.explain)


def _bin_pack(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, BinPackRule)
    eligible = given.eligible
    if given.near is not None and not given.settings.preserve_latest:
        eligible = pools.around(eligible, given.near, rule)
    return pools.plan(eligible, rule, given.table, given.now, given.explain)


def _upsert_compaction(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, UpsertCompactionRule)
    eligible, counts = given.eligible, given.invalid_counts
    if given.near is not None and counts is not None and not given.settings.preserve_latest:
        eligible = upsert.around(eligible, given.near, counts, rule)
    return upsert.plan(eligible, rule, given.table, counts, given.explain)


def _refresh(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, RefreshRule)
    layout = given.settings.layout
    return refresh.plan(
        given.eligible, rule, given.table, layout, given.index_facts, given.explain, given.all_segments,
        whole=given.settings.upsert is not None,  # seed 004: an upsert table stays M:1
    )  # fmt: skip


PLANNERS: Mapping[RuleName, Planner] = {
    RuleName.AUTO_MERGE: _auto_merge,
    RuleName.MINOR: _minor,
    RuleName.MAJOR: _major,
    RuleName.BIN_PACK: _bin_pack,
    RuleName.UPSERT_COMPACTION: _upsert_compaction,
    RuleName.REFRESH: _refresh,
}

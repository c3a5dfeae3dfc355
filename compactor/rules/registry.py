"""Every rule's planner, by name: the one place a new rule is wired in.

A rule is a config model (`config.rules`), a planner module here, and one
entry in each map below: its planner, and where an attempt near new segments
looks (`NARROWERS`: a part of the whole table, before the shared filters). Each
entry adapts the engine's uniform call to the planner's own arguments, so planners
keep small, explicit signatures their tests call directly.
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
from compactor.domain.columns import Bools, SegmentColumns
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


@dataclass(frozen=True, slots=True)
class Around:
    """What an attempt near new segments narrows a rule's scan with."""

    segments: SegmentColumns  # the whole table
    near: Collection[Segment]  # the segments the triggering events brought, and those they freed
    settings: TableSettings
    invalid_counts: Mapping[str, int] | None
    passes: Callable[[SegmentColumns], Bools]  # per segment: the shared filters, not claimed


Narrower = Callable[[RuleConfig, Around], SegmentColumns]


def _auto_merge(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, AutoMergeRule)
    starts = given.all_segments.start
    first = float(starts.min()) if len(starts) else None
    near, eligible = given.near, given.eligible
    late = None
    if rule.sealing is not None:  # a late run lies in one bucket: near an event, its buckets hold it
        everything = given.all_segments if near is None else auto_merge.around(given.all_segments, near, rule)
        late = LateData.of(everything, rule, watermark(given.all_segments, rule.sealing))
    return auto_merge.plan(eligible, rule, given.table, first, given.explain, late)


def _minor(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, MinorRule)
    return level_threshold.plan(given.eligible, rule, given.table, given.explain)


def _major(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, MajorRule)
    return size_threshold.plan(given.eligible, rule, given.table, given.explain)


def _bin_pack(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, BinPackRule)
    return pools.plan(given.eligible, rule, given.table, given.now, given.explain)


def _upsert_compaction(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, UpsertCompactionRule)
    return upsert.plan(given.eligible, rule, given.table, given.invalid_counts, given.explain)


def _refresh(rule: RuleConfig, given: RuleInput) -> RuleOutcome:
    assert isinstance(rule, RefreshRule)
    layout = given.settings.layout
    return refresh.plan(
        given.eligible,
        rule,
        given.table,
        layout,
        given.index_facts,
        given.explain,
        given.all_segments,
        whole=given.settings.upsert is not None,  # as in Pinot, an upsert table's segments map M:1
    )


PLANNERS: Mapping[RuleName, Planner] = {
    RuleName.AUTO_MERGE: _auto_merge,
    RuleName.MINOR: _minor,
    RuleName.MAJOR: _major,
    RuleName.BIN_PACK: _bin_pack,
    RuleName.UPSERT_COMPACTION: _upsert_compaction,
    RuleName.REFRESH: _refresh,
}


def _near_buckets(rule: RuleConfig, around: Around) -> SegmentColumns:
    assert isinstance(rule, AutoMergeRule)
    return auto_merge.around(around.segments, around.near, rule)


def _near_levels(rule: RuleConfig, around: Around) -> SegmentColumns:
    return level_threshold.at_levels(around.segments, {s.level for s in around.near})


def _near_walk(rule: RuleConfig, around: Around) -> SegmentColumns:
    assert isinstance(rule, MajorRule)
    return size_threshold.around(around.segments, around.near, rule, around.passes)


def _near_bins(rule: RuleConfig, around: Around) -> SegmentColumns:
    assert isinstance(rule, BinPackRule)
    return pools.around(around.segments, around.near, rule)


def _near_counts(rule: RuleConfig, around: Around) -> SegmentColumns:
    assert isinstance(rule, UpsertCompactionRule)
    if around.invalid_counts is None:  # nothing is planned without counts: nothing to narrow
        return around.segments
    return upsert.around(around.segments, around.near, around.invalid_counts, rule)


def _near_drift(rule: RuleConfig, around: Around) -> SegmentColumns:
    assert isinstance(rule, RefreshRule)
    return refresh.around(around.segments, around.near, around.settings.layout)


NARROWERS: Mapping[RuleName, Narrower] = {
    RuleName.AUTO_MERGE: _near_buckets,
    RuleName.MINOR: _near_levels,
    RuleName.MAJOR: _near_walk,
    RuleName.BIN_PACK: _near_bins,
    RuleName.UPSERT_COMPACTION: _near_counts,
    RuleName.REFRESH: _near_drift,
}

"""Segment refresh (Apache Pinot's SegmentRefreshTask).

A segment drifts from the table's layout when it was built with another time
column, partitioning, sorted column, columns, types, single/multi-value kind,
encoding or compression, or when its rows span several time buckets or value
partitions, or are not sorted. Drifted segments, and segments far from the size
targets, are rewritten so they conform; the rewrite is one Delta commit per task.

Facts about a segment come from what it recorded when it was built (`built_with`)
and, unless `skip_index_check`, from an inspection of its files and rows (the
costly index check), which the executor performs and passes in here.

Near new segments (`around`): whether a segment drifts is its own matter, so on a
table where nothing drifted only the new segments can, and the conforming small ones
of their time buckets may now add up to a merge; an attempt looks at those alone.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from enum import StrEnum
from typing import Any

import numpy as np

from compactor.config.built_with import layout_record
from compactor.config.layout import LayoutConfig
from compactor.config.rules import RefreshRule, RuleName
from compactor.domain.columns import Ints, SegmentColumns, order_by
from compactor.domain.layout import HIDDEN_COLUMNS, IndexFacts
from compactor.domain.plans import Decision, MergePlan, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment

RULE = RuleName.REFRESH


class Drift(StrEnum):
    """Why a segment no longer matches its table's layout."""

    NO_LAYOUT_RECORDED = "no_layout_recorded"
    TIME_COLUMN = "time_column_changed"
    TIME_BUCKETS = "spans_several_time_buckets"
    PARTITIONING = "partitioning_changed"
    MULTIPLE_PARTITIONS = "holds_several_partitions"
    SORTED_COLUMN = "sorted_column_changed"
    UNSORTED = "not_sorted"
    COLUMN_ADDED = "column_added"
    COLUMN_REMOVED = "column_removed"
    DATA_TYPE = "data_type_changed"
    SINGLE_MULTI_VALUE = "single_multi_value_changed"
    ENCODING = "encoding_changed"
    COMPRESSION = "compression_changed"
    SUB_PARTITION_VALUES = "sub_partition_values_changed"
    OVERSIZED = "oversized"
    UNDERSIZED = "undersized"


# a Delta table has one schema: these changes are applied to every segment in one commit
TABLE_WIDE = frozenset({Drift.COLUMN_REMOVED, Drift.DATA_TYPE, Drift.SINGLE_MULTI_VALUE})
# what rewriting a segment whole (one output with its range and rows) fixes: an upsert table's
# refresh (as in Pinot, its segments map M:1: never re-bucketed, repartitioned or split)
IN_PLACE = frozenset(
    {Drift.NO_LAYOUT_RECORDED, Drift.ENCODING, Drift.COMPRESSION, Drift.UNSORTED, Drift.SORTED_COLUMN}
)


def drift(
    segment: Segment, layout: LayoutConfig, facts: IndexFacts | None, want: Mapping[str, Any] | None = None
) -> list[Drift]:
    """Every way `segment` differs from `layout` (recorded facts, plus the index check's);
    `want`: the layout's record, when the caller has it at hand."""
    found: list[Drift] = []
    recorded: dict[str, Any] = json.loads(segment.built_with) if segment.built_with else {}
    if not recorded and facts is None:
        return [Drift.NO_LAYOUT_RECORDED]
    want = want if want is not None else json.loads(layout_record(layout, 0))
    if recorded:
        for key, kind in (
            ("time_column", Drift.TIME_COLUMN),
            ("bucket_seconds", Drift.TIME_BUCKETS),
            ("partitioning", Drift.PARTITIONING),
            ("sorted_column", Drift.SORTED_COLUMN),
            ("encoding", Drift.ENCODING),
            ("compression", Drift.COMPRESSION),
        ):
            if recorded.get(key) != want[key]:
                found.append(kind)
    columns: Mapping[str, Any] = (
        facts.columns if facts else {k: tuple(v) for k, v in recorded.get("columns", {}).items()}
    )
    columns = {k: tuple(v) for k, v in columns.items() if k not in HIDDEN_COLUMNS}
    wanted = {n: (c.type, c.multi_value) for n, c in layout.columns.items()}
    if set(wanted) - set(columns):
        found.append(Drift.COLUMN_ADDED)
    if set(columns) - set(wanted):
        found.append(Drift.COLUMN_REMOVED)
    common = set(wanted) & set(columns)
    if any(columns[c][1] != wanted[c][1] for c in common):
        found.append(Drift.SINGLE_MULTI_VALUE)
    if any(columns[c][0] != wanted[c][0] and columns[c][1] == wanted[c][1] for c in common):
        found.append(Drift.DATA_TYPE)
    if facts is not None:
        if facts.bucket_count > 1:
            found.append(Drift.TIME_BUCKETS)
        if layout.partitioning and facts.partition_count > 1:
            found.append(Drift.MULTIPLE_PARTITIONS)
        if not facts.sorted:
            found.append(Drift.UNSORTED)
        # files prove plain encoding wrong only when some column holds a dictionary: with dictionaries
        # on, a writer falls back to plain for a column they do not shrink (all-distinct values, a
        # few rows), so plain files may well come from a dictionary writer
        if facts.encoding == "dictionary" and layout.encoding == "plain":
            found.append(Drift.ENCODING)
        if facts.compression != layout.compression:
            found.append(Drift.COMPRESSION)
        values = facts.sub_partition_values
        if values is not None and values != segment.sub_partitions:
            found.append(Drift.SUB_PARTITION_VALUES)  # e.g. the sub-partition column changed
    return list(dict.fromkeys(found))


def _sizing(segment: Segment, rule: RefreshRule) -> Drift | None:
    if segment.records > rule.max_records_per_segment or segment.bytes > 2 * rule.desired_segment_size:
        return Drift.OVERSIZED
    return None


def around(
    segments: SegmentColumns, near: Collection[Segment], layout: LayoutConfig | None
) -> SegmentColumns:
    """The `near` segments and every segment of their time buckets (see the module)."""
    if layout is None:
        return segments.take(np.zeros(0, np.int64))
    period = layout.bucket_time_period.total_seconds()
    start, keep = segments.start, np.zeros(len(segments), np.bool_)
    for bucket in {s.range.start_ts // period for s in near}:  # comparisons: no division per segment
        keep |= (start >= bucket * period) & (start < (bucket + 1) * period)
    keep[segments.positions({s.id for s in near})] = True
    return segments.take(keep)


def plan(
    segments: Sequence[Segment],
    rule: RefreshRule,
    table: str,
    layout: LayoutConfig | None,
    facts: Mapping[str, IndexFacts] | None,
    explain: bool = True,
    table_segments: Sequence[Segment] | None = None,
    whole: bool = False,
) -> RuleOutcome:
    """Tasks rewriting drifted segments, within the per-evaluation limits.

    Table-wide drifts (a column removed, a type or single/multi-value change)
    rewrite every segment of the table in one task, marked `table_wide`, as a
    Delta table has one schema: `table_segments` (default: `segments`), the
    ones the shared filters keep out included, since the overwrite replaces them too. Otherwise segments are taken in time order and packed into tasks
    of at most `max_records_per_task` rows and `max_data_size_per_task` bytes, at
    most `table_max_num_tasks` tasks; the rest waits for the next evaluation,
    which the tasks' own completion events trigger. Small conforming segments
    sharing a time bucket are merged as undersized.

    `whole` (an upsert table): each drifted segment is rewritten whole, one output with its
    range and every row, for the drifts that fixes (encoding, compression, sort order); what
    would take re-bucketing, repartitioning, splitting or a schema rewrite is left as it is.
    """
    if layout is None:
        return RuleOutcome()
    if facts is None and not rule.skip_index_check:
        skipped = [
            Decision(s.id, RULE, False, SkipReason.NO_STATISTICS, "index check not run") for s in segments
        ]
        return RuleOutcome((), tuple(skipped) if explain else ())
    columns = SegmentColumns.of(segments)
    kinds = _drifts(columns, rule, layout, facts)
    order = order_by(columns.start, columns)  # time order, ties by id
    ordered = columns.pick(order) if explain else []  # every segment, to explain each
    if whole:
        return _in_place(table, _in_order(columns, order, kinds), kinds, rule, explain, ordered)
    table_wide = any(set(k) & TABLE_WIDE for k in kinds.values())
    if table_wide:
        tasks = [sorted(table_segments or segments, key=lambda s: (s.start, s.id))]
    else:
        _mark_undersized(columns, order, kinds, rule, layout)
        tasks = _pack_tasks(_in_order(columns, order, kinds), rule)
    plans = [
        replace(make_plan(table, RULE, task, allow_single=True), table_wide=table_wide)
        for task in tasks[: rule.table_max_num_tasks]
    ]
    decisions = _explain(plans, tasks, ordered, kinds, rule) if explain else []
    return RuleOutcome(tuple(plans), tuple(decisions))


def _in_order(columns: SegmentColumns, order: Ints, kinds: Mapping[str, list[Drift]]) -> list[Segment]:
    """The segments with drifts, in time order."""
    if not kinds:
        return []
    return columns.pick(order[columns.mask(kinds)[order]])


def _in_place(
    table: str,
    drifted: Sequence[Segment],
    kinds: Mapping[str, list[Drift]],
    rule: RefreshRule,
    explain: bool,
    ordered: Sequence[Segment],
) -> RuleOutcome:
    """One task per drifted segment, rewritten whole (1:1), for the drifts that fixes."""
    fixable = {sid: [k for k in found if k in IN_PLACE] for sid, found in kinds.items()}
    tasks = [[s] for s in drifted if fixable.get(s.id)]
    plans = [make_plan(table, RULE, task, allow_single=True) for task in tasks[: rule.table_max_num_tasks]]
    if not explain:
        return RuleOutcome(tuple(plans))
    decisions = [_kept_m_to_1(d, kinds) for d in _explain(plans, tasks, ordered, fixable, rule)]
    return RuleOutcome(tuple(plans), tuple(decisions))


def _kept_m_to_1(decision: Decision, kinds: Mapping[str, list[Drift]]) -> Decision:
    """A drifted segment left alone because fixing it would split or re-bucket it says so."""
    found = kinds.get(decision.segment_id, [])
    if decision.chosen or not found or any(k in IN_PLACE for k in found):  # chosen, or over the task limit
        return decision
    why = ", ".join(k for k in found if k not in IN_PLACE)
    text = f"{why}: an upsert table's segments are never re-bucketed, repartitioned or split (M:1)"
    return Decision(decision.segment_id, RULE, False, SkipReason.KEEPS_M_TO_1, text)


def _drifts(
    columns: SegmentColumns,
    rule: RefreshRule,
    layout: LayoutConfig,
    facts: Mapping[str, IndexFacts] | None,
) -> dict[str, list[Drift]]:
    """Each drifted or oversized segment's reasons. Without index facts a segment's drift
    follows from its record and sub-partitions alone, so each distinct pair is compared once."""
    want = json.loads(layout_record(layout, 0))
    oversized = (columns.records > rule.max_records_per_segment) | (
        columns.size > 2 * rule.desired_segment_size
    )
    checked = None if rule.skip_index_check else facts
    by_record: dict[tuple[str | None, frozenset[str]], list[Drift]] = {}
    kinds: dict[str, list[Drift]] = {}
    for s, big in zip(columns, oversized.tolist(), strict=True):
        fact = None if checked is None else checked.get(s.id)
        if fact is None:
            key = (s.built_with, s.sub_partitions)
            found = by_record.get(key)
            if found is None:
                found = by_record[key] = drift(s, layout, None, want)
        else:
            found = drift(s, layout, fact, want)
        if big:
            found = [*found, Drift.OVERSIZED]
        if found:
            kinds[s.id] = list(found)
    return kinds


def _explain(
    plans: Sequence[MergePlan],
    tasks: Sequence[Sequence[Segment]],
    ordered: Sequence[Segment],
    kinds: Mapping[str, list[Drift]],
    rule: RefreshRule,
) -> list[Decision]:
    decisions = [
        Decision(s.id, RULE, True, None, ", ".join(kinds.get(s.id, ["table-wide rewrite"])), merge.plan_id)
        for merge in plans
        for s in merge.inputs
    ]
    decisions += [
        Decision(s.id, RULE, False, SkipReason.TASK_LIMIT, f"more than {rule.table_max_num_tasks} tasks")
        for task in tasks[rule.table_max_num_tasks :]
        for s in task
    ]
    chosen = {d.segment_id for d in decisions}
    decisions += [
        Decision(s.id, RULE, False, SkipReason.CONFORMS, "matches the layout and the size targets")
        for s in ordered
        if s.id not in chosen
    ]
    return decisions


def _mark_undersized(
    columns: SegmentColumns,
    order: Ints,
    kinds: dict[str, list[Drift]],
    rule: RefreshRule,
    layout: LayoutConfig,
) -> None:
    """Conforming segments of one time bucket that together fit the targets are merged."""
    conforming = order[~columns.mask(kinds)[order]] if kinds else order  # in time order
    if len(conforming) < 2:
        return
    period = layout.bucket_time_period.total_seconds()
    buckets, members = np.unique(columns.start[conforming] // period, return_inverse=True)
    count = np.bincount(members, minlength=len(buckets))
    records = np.bincount(members, columns.records[conforming], minlength=len(buckets))
    size = np.bincount(members, columns.size[conforming], minlength=len(buckets))
    fits = (count >= 2) & (records <= rule.max_records_per_segment) & (size <= rule.desired_segment_size)
    for s in columns.pick(conforming[fits[members]]):
        kinds[s.id] = [Drift.UNDERSIZED]


def _pack_tasks(drifted: Sequence[Segment], rule: RefreshRule) -> list[list[Segment]]:
    tasks: list[list[Segment]] = []
    records = size = 0
    for s in drifted:
        if (
            not tasks
            or records + s.records > rule.max_records_per_task
            or size + s.bytes > rule.max_data_size_per_task
        ):
            tasks.append([])
            records = size = 0
        tasks[-1].append(s)
        records += s.records
        size += s.bytes
    return tasks

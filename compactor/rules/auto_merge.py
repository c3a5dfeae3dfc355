"""Time-layer auto-merge, after Apache Kylin's auto-merge of segments.

An attempt walks the selected levels from the largest down. At each level,
segments that cover their whole bucket or cross a bucket boundary are at or
above the threshold and are skipped. A run of the remaining contiguous segments
(same schema version, same sub-partitions, all in one bucket) merges when it
reaches the bucket's end, or the start of a skipped segment that crosses it (a
load straddling the boundary covers the rest of the bucket, as a month covers
the rest of a week it cuts), and starts at the bucket's start, at the end of an
adjacent skipped segment, or where the table's first segment begins. At most one
merge per attempt: the merge's own completion event triggers the next attempt.

The scan is vectorised with numpy over epoch seconds, so one attempt over a
million segments stays within a second; decisions are built only when asked.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from compactor.config.rules import AutoMergeRule, RuleName
from compactor.domain.calendar import Level, bucket, largest_first
from compactor.domain.columns import Floats, Ints, SegmentColumns, order_by
from compactor.domain.plans import Decision, MergePlan, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment
from compactor.rules.late_data import LateData, is_fold

RULE = RuleName.AUTO_MERGE
MAX_WAITING = 256  # runs ready beyond the attempt's one merge, counted as debt (the rest is not)
_DAY = 86400


def at_or_above(segment: Segment, level: Level) -> bool:
    """True when the segment already covers its bucket or crosses a bucket boundary."""
    home = bucket(level, segment.start)
    return segment.end > home.end or (segment.start == home.start and segment.end == home.end)


def _month_index(ts: Floats) -> npt.NDArray[np.int64]:
    return ts.astype("datetime64[s]").astype("datetime64[M]").astype(np.int64)


def _month_start(months: npt.NDArray[np.int64]) -> Floats:
    return months.astype("datetime64[M]").astype("datetime64[s]").astype(np.float64)


def bucket_bounds(level: Level, ts: Floats) -> tuple[Floats, Floats]:
    """Vectorised `calendar.bucket`: (start, end) epoch seconds of each instant's bucket."""
    if level is Level.HOUR:
        start = np.floor(ts / 3600) * 3600
        return start, start + 3600
    day = np.floor(ts / _DAY)
    if level is Level.DAY:
        return day * _DAY, (day + 1) * _DAY
    # coarser buckets depend on the day alone: work per distinct day (hourly loads: 24x fewer)
    days, back = _distinct(day)
    start, end = _day_bucket_bounds(level, days)
    return start[back], end[back]


def _distinct(values: Floats) -> tuple[Floats, Ints]:
    """The distinct values and, per input, the index of its value among them."""
    if len(values) and np.all(values[1:] >= values[:-1]):  # time-ordered input: no sort needed
        new = np.r_[True, values[1:] != values[:-1]]
        return values[new], np.cumsum(new) - 1
    found, back = np.unique(values, return_inverse=True)
    return found, back.reshape(-1)


def _day_bucket_bounds(level: Level, day: Floats) -> tuple[Floats, Floats]:
    months = _month_index(day * _DAY)
    if level is Level.WEEK:  # Monday-based weeks, cut by month (1970-01-01 was a Thursday)
        monday = (day - (day + 3) % 7) * _DAY
        return np.maximum(monday, _month_start(months)), np.minimum(
            monday + 7 * _DAY, _month_start(months + 1)
        )
    span = {Level.MONTH: 1, Level.QUARTER: 3, Level.YEAR: 12}[level]
    first = months - months % span
    return _month_start(first), _month_start(first + span)


@dataclass(frozen=True, slots=True)
class _Level:
    """One level's scan: which segments are skipped and how the rest form runs."""

    level: Level
    above: npt.NDArray[np.bool_]
    below: npt.NDArray[np.int64]  # indices (in time order) of segments below the threshold
    run_first: npt.NDArray[np.int64]  # per run: position in `below` of its first and last segment
    run_last: npt.NDArray[np.int64]
    complete: npt.NDArray[np.bool_]  # the run reaches its bucket's end
    anchored: npt.NDArray[np.bool_]
    mergeable: npt.NDArray[np.bool_]
    kind_cut: npt.NDArray[np.bool_]  # per boundary in `below`: contiguous, same bucket, other kind


def _scan(level: Level, start: Floats, end: Floats, kind: Ints, first: float | None) -> _Level:
    """One level's scan of the segments in time order: their `start` and `end` (epoch seconds),
    their `kind` (the group code: schema version and build), where the table begins (`first`)."""
    home_start, home_end = bucket_bounds(level, start)  # each segment's bucket at this level
    above = (end > home_end) | ((start == home_start) & (end == home_end))
    if above.any():
        below = np.flatnonzero(~above)
        below_start, below_end, below_kind = start[below], end[below], kind[below]
        below_home_start, below_home_end = home_start[below], home_end[below]
    else:  # every segment is below this level (the usual case at a small level): no copies
        below = np.arange(len(start))
        below_start, below_end, below_kind = start, end, kind
        below_home_start, below_home_end = home_start, home_end
    # neighbours in `below` that touch within one bucket; a run goes on where they are of one kind
    touching = (below_start[1:] == below_end[:-1]) & (below_home_start[1:] == below_home_start[:-1])
    joins = touching & (below_kind[1:] == below_kind[:-1])
    run_first = np.flatnonzero(np.concatenate(([True], ~joins))) if len(below) else np.array([], np.int64)
    run_last = np.concatenate((run_first[1:] - 1, [len(below) - 1])) if len(below) else run_first
    run_start, run_end = below_start[run_first], below_end[run_last]
    run_home_start, run_home_end = below_home_start[run_first], below_home_end[run_first]
    anchored = (run_start == run_home_start) | np.isin(run_start, end[above])
    if first is not None:
        anchored |= run_start == first
    # a straddler starting where the run ends covers the rest of the bucket
    complete = (run_end == run_home_end) | np.isin(run_end, start[above])
    mergeable = complete & anchored & (run_last > run_first)
    return _Level(level, above, below, run_first, run_last, complete, anchored, mergeable, touching & ~joins)


def plan(
    segments: Sequence[Segment],
    rule: AutoMergeRule,
    table: str,
    table_start: float | None,
    explain: bool = True,
    late: LateData | None = None,
) -> RuleOutcome:
    """One attempt over the eligible `segments` of `table`.

    `table_start` (epoch seconds) is where the table's first segment begins, over
    all segments, eligible or not: a run may start there without reaching back to
    its bucket's start. `late`: the table's late data (`late_data`), when the rule seals.
    """
    columns = SegmentColumns.of(segments)
    folds: list[MergePlan] = []
    eligible_late: frozenset[str] = frozenset()
    if late is not None and late.runs:  # the scan sees the disjoint rest; folds come first
        folds = late.folds(columns, table)
        is_late = columns.mask(late.ids)
        eligible_late = frozenset(s.id for s in columns.pick(np.flatnonzero(is_late)))
        columns = columns.take(~is_late)
    ready, inside, decisions, ordered = _levels(columns, rule, table, table_start, explain)
    if late is not None and late.runs:
        ready, inside = _with_late(late, folds, ready, inside, eligible_late)
    if not ready:
        waiting_late = late.decisions(eligible_late, None) if late is not None and explain else []
        return RuleOutcome((), (*decisions.values(), *waiting_late))
    merge, waiting, alternatives = ready[0], tuple(ready[1:]), tuple(inside)
    if ordered is None:
        return RuleOutcome((merge,), waiting=waiting, alternatives=alternatives)
    explained = _decisions_with_merge(merge, ordered, decisions, eligible_late)
    if late is not None:
        explained += tuple(late.decisions(eligible_late, merge))
    return RuleOutcome((merge,), explained, waiting, alternatives)


def _levels(
    columns: SegmentColumns, rule: AutoMergeRule, table: str, table_start: float | None, explain: bool
) -> tuple[list[MergePlan], list[MergePlan], dict[str, Decision], list[Segment] | None]:
    """Every mergeable run, largest level first, then in time order; the runs inside a larger
    level's; the decisions down to the level that merges; the segments in time order (explain)."""
    # runs need one schema version and one build (sub-partition values, indexes): the group code
    start, end, kind = columns.start, columns.end, columns.group
    order = order_by(start, columns, end)  # time order, whatever the rows' order
    start, end, kind = start[order], end[order], kind[order]
    ordered = columns.pick(order) if explain else None
    decisions: dict[str, Decision] = {}
    ready: list[MergePlan] = []
    inside: list[MergePlan] = []  # mergeable runs within a larger level's mergeable run
    taken = np.zeros(len(start), np.bool_)  # in a run of a larger level already
    for level in largest_first(rule.levels):
        scan = _scan(level, start, end, kind, table_start)
        if ordered is not None and not ready:  # explained down to the level that merges
            _explain_level(scan, ordered, decisions)
        for hit in np.flatnonzero(scan.mergeable).tolist():
            run = scan.below[scan.run_first[hit] : scan.run_last[hit] + 1]
            found = inside if taken[run].any() else ready
            if len(found) <= MAX_WAITING:
                found.append(make_plan(table, RULE, columns.pick(order[run]), level=str(level)))
            taken[run] = True
    return ready, inside, decisions, ordered


def _with_late(
    late: LateData,
    folds: list[MergePlan],
    ready: list[MergePlan],
    inside: list[MergePlan],
    eligible_late: frozenset[str],
) -> tuple[list[MergePlan], list[MergePlan]]:
    """Folds first; the runs they overlap wait; late segments inside a run's span join it."""
    folded = {sid for f in folds for sid in f.input_ids}
    taken = set(folded)

    def joined(plans: list[MergePlan]) -> list[MergePlan]:
        return [late.joined(p, eligible_late, taken) for p in plans if folded.isdisjoint(p.input_ids)]

    return folds + joined(ready), joined(inside)


def around(eligible: SegmentColumns, touched: Iterable[Segment], rule: AutoMergeRule) -> SegmentColumns:
    """The eligible segments that overlap the largest level's buckets of the `touched` ones.

    Only there can a run newly qualify: a run lies in one bucket of each level, the
    levels' buckets nest (weeks are cut by months), and the segments that anchor or
    complete a run overlap its largest bucket unless the run starts or ends on that
    bucket's boundary, where it is anchored or complete anyway.
    """
    largest = largest_first(rule.levels)[0]
    keep = np.zeros(len(eligible), np.bool_)
    for s in touched:
        span_start = bucket(largest, s.start).start.timestamp()
        span_end = bucket(largest, s.end).end.timestamp()
        keep |= (eligible.start < span_end) & (eligible.end > span_start)
    return eligible.take(keep)


def _explain_level(scan: _Level, ordered: list[Segment], decisions: dict[str, Decision]) -> None:
    level = scan.level
    for i in np.flatnonzero(scan.above):
        s = ordered[i]
        home = bucket(level, s.start)
        detail = (
            f"{level}: {s.range} covers its whole bucket"
            if s.range == home
            else f"{level}: {s.range} crosses the bucket boundary {home.end.isoformat()}"
        )
        decisions[s.id] = Decision(s.id, RULE, False, SkipReason.AT_OR_ABOVE_THRESHOLD, detail)
    for r in np.flatnonzero(~scan.mergeable):
        first, last = scan.run_first[r], scan.run_last[r]
        members = [ordered[i] for i in scan.below[first : last + 1]]
        home = bucket(level, members[0].start)
        neighbours = [scan.below[first - 1]] if first > 0 and scan.kind_cut[first - 1] else []
        neighbours += [scan.below[last + 1]] if last < len(scan.kind_cut) and scan.kind_cut[last] else []
        if neighbours:  # a contiguous segment of the same bucket differs in kind: say how
            other = ordered[neighbours[0]]
            if other.schema_version != members[0].schema_version:
                reason = SkipReason.VERSION_MISMATCH
                detail = f"{level}: {other.id} has schema v{other.schema_version}, this run v{members[0].schema_version}"
            elif other.sub_partitions != members[0].sub_partitions:
                reason = SkipReason.SUB_PARTITIONS_DIFFER
                detail = (
                    f"{level}: {other.id} holds sub-partitions {sorted(other.sub_partitions)}, "
                    f"this run {sorted(members[0].sub_partitions)}"
                )
            else:
                reason = SkipReason.INDEXES_DIFFER
                detail = (
                    f"{level}: {other.id} built indexes {sorted(other.indexes)}, "
                    f"this run {sorted(members[0].indexes)}"
                )
        elif not scan.complete[r]:
            reason, detail = (
                SkipReason.INCOMPLETE_BUCKET,
                f"{level}: run ends {members[-1].end.isoformat()}, bucket {home}",
            )
        elif scan.anchored[r]:
            reason, detail = SkipReason.NOTHING_TO_MERGE_WITH, f"{level}: alone in bucket {home}"
        else:
            reason = SkipReason.GAP
            detail = f"{level}: nothing covers [{home.start.isoformat()}, {members[0].start.isoformat()})"
        for s in members:
            decisions[s.id] = Decision(s.id, RULE, False, reason, detail)


def _decisions_with_merge(
    merge: MergePlan, ordered: list[Segment], decisions: dict[str, Decision], late: Collection[str]
) -> tuple[Decision, ...]:
    """The merge's inputs chosen (but the `late` ones, said apart), the rest as decided or left
    for the next attempt."""
    ids = set(merge.input_ids)
    if is_fold(merge):
        detail = f"{merge.level}: folds the late run into {merge.output.range}"
    else:
        detail = f"{merge.level}: merges into bucket {bucket(Level(str(merge.level)), merge.inputs[0].start)}"
    chosen = [
        Decision(s.id, RULE, True, None, detail, merge.plan_id) for s in merge.inputs if s.id not in late
    ]
    rest = [d for sid, d in decisions.items() if sid not in ids]
    rest += [
        Decision(
            s.id, RULE, False, SkipReason.ONE_MERGE_PER_ATTEMPT, f"{merge.plan_id} is this attempt's merge"
        )
        for s in ordered
        if s.id not in ids and s.id not in decisions
    ]
    return tuple(chosen + rest)

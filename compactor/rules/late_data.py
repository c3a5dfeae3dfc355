"""Late data in time-layer tables: a watermark, sealed data, late runs folded in by ratio.

A time-layer table holds disjoint ranges. With `sealing` on its auto_merge rule,
a load that overlaps data already there is accepted as *late* data (it must lie
within one bucket of the rule's largest level). It does not rewrite what it
overlaps at once: it waits beside it. A table's late segments form *late runs*:
late segments that overlap each other or the same segments, with those
segments (the run's host: a merged day, week or month, or the loads of one).

The watermark is the latest event end the table holds minus `allowed_lateness`;
a run whose host ends at or before it is *sealed*. A late run is folded (its
host and its late segments merged into one segment) when

- it reaches `max_late_segments` late segments (sealed or not: a hard bound), or
- it is sealed and its late bytes reach `late_fold_ratio` x its host's bytes, or
- it is not sealed: within the allowed lateness, late data is merged at once.

A late segment inside the span of a merge the rules make anyway joins it: that
data is rewritten then at no extra cost (a bucket still merging absorbs its late
data this way). So each late byte is written by its load and once more by the
fold that takes it, and a host of B bytes is rewritten only once late bytes reach
r x B: at most 1/r host bytes per late byte, 1 + 1/r rewrites in all (folds forced
by the segment ceiling can cost more; bounding the count is their purpose).

Which segments are late is derived from the segments alone, so nothing new is
stored: rank segments by (outputs of merges and refreshes first, then load
time, then id); a segment is late when it overlaps one ranked before it. Of two
overlapping segments the later ranked is late, so the others are pairwise
disjoint and the time-layer scan runs on them unchanged.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from compactor.config.rules import AutoMergeRule, RuleConfig, RuleName, Sealing
from compactor.domain.calendar import Level, bucket, largest_first
from compactor.domain.columns import Bools, SegmentColumns
from compactor.domain.plans import Decision, MergePlan, SkipReason, make_plan
from compactor.domain.segments import Origin, Segment, TimeRange

RULE = RuleName.AUTO_MERGE
FOLD = "fold"  # a fold's plan level: "fold:<level>" when its span is one bucket of a level


def is_fold(plan: MergePlan) -> bool:
    return plan.level == FOLD or (plan.level or "").startswith(f"{FOLD}:")


def late_mask(columns: SegmentColumns) -> Bools:
    """Which segments are late (see the module). Vectorised where nothing overlaps; only the
    segments of overlapping clusters are ranked one by one."""
    late = np.zeros(len(columns), np.bool_)
    if len(columns) < 2:
        return late
    order = np.argsort(columns.start, kind="stable")
    start, end = columns.start[order], columns.end[order]
    joins = np.r_[False, start[1:] < np.maximum.accumulate(end)[:-1]]  # overlaps one starting earlier
    if not joins.any():
        return late
    bounds = np.r_[np.flatnonzero(~joins), len(start)]  # clusters of overlapping segments, in start order
    for cluster in np.unique(np.cumsum(~joins)[joins]).tolist():  # the clusters of more than one (1-based)
        positions = order[bounds[cluster - 1] : bounds[cluster]]
        late[positions] = _ranked_late(columns.pick(positions))
    return late


def _ranked_late(members: list[Segment]) -> Bools:
    """Per member: does it overlap a member ranked before it?"""
    rank = sorted(range(len(members)), key=lambda i: _rank(members[i]))
    start = np.array([members[i].range.start_ts for i in rank])
    end = np.array([members[i].range.end_ts for i in rank])
    late = np.zeros(len(members), np.bool_)
    for k in range(1, len(rank)):
        late[rank[k]] = bool(np.any((start[:k] < end[k]) & (end[:k] > start[k])))
    return late


def _rank(segment: Segment) -> tuple[int, datetime, str]:
    return int(segment.origin is Origin.LOAD), segment.loaded_at, segment.id


def watermark(all_segments: SegmentColumns, sealing: Sealing) -> float | None:
    """Epoch seconds: the latest event end held minus the allowed lateness (None: no data)."""
    if not len(all_segments):
        return None
    return float(all_segments.end.max()) - sealing.allowed_lateness.total_seconds()


@dataclass(frozen=True, slots=True)
class LateRun:
    """A late run: its late segments, the segments they overlap (its host), whose span is the
    run's `bucket`, and whether it folds now."""

    bucket: TimeRange
    late: tuple[Segment, ...]
    base: tuple[Segment, ...]
    sealed: bool
    due: str | None  # why it folds now: "ceiling", "ratio" or "open"; None while it waits

    @property
    def late_bytes(self) -> int:
        return sum(s.bytes for s in self.late)

    @property
    def base_bytes(self) -> int:
        return sum(s.bytes for s in self.base)

    @property
    def members(self) -> tuple[Segment, ...]:
        return self.base + self.late

    def describe(self, sealing: Sealing) -> str:
        state = "sealed" if self.sealed else "open"
        share = self.late_bytes / self.base_bytes if self.base_bytes else float("inf")
        return (
            f"{len(self.late)} late segment(s) of {state} bucket {self.bucket}: {self.late_bytes} of "
            f"{self.base_bytes} bytes ({share:.1%}); folds at {sealing.late_fold_ratio:.0%} "
            f"or {sealing.max_late_segments} segments"
        )


@dataclass(frozen=True, slots=True)
class LateData:
    """A time-layer table's late runs, found over all its segments (eligible or not)."""

    sealing: Sealing
    levels: tuple[Level, ...]
    watermark: float | None
    runs: tuple[LateRun, ...]

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(s.id for run in self.runs for s in run.late)

    @classmethod
    def of(cls, segments: SegmentColumns, rule: AutoMergeRule, mark: float | None) -> LateData:
        """The late runs among `segments` (all of a table's, or all near an attempt's events)."""
        assert rule.sealing is not None
        late = late_mask(segments)
        if not late.any():
            return cls(rule.sealing, rule.levels, mark, ())
        base = segments.take(~late)
        order = np.argsort(base.start, kind="stable")  # disjoint: the ends ascend as well
        starts, ends = base.start[order], base.end[order]
        lates = segments.pick(np.flatnonzero(late))
        hosts = [
            order[
                np.searchsorted(ends, s.range.start_ts, side="right") : np.searchsorted(
                    starts, s.range.end_ts
                )
            ]
            for s in lates
        ]
        runs = []
        for members in _connected(lates, hosts):
            host_rows = sorted({int(h) for i in members for h in hosts[i]})
            run_late, run_base = tuple(lates[i] for i in members), tuple(base.pick(host_rows))
            around = run_base or run_late
            span = TimeRange(min(s.start for s in around), max(s.end for s in around))
            runs.append(_run(span, run_late, run_base, mark, rule.sealing))
        return cls(rule.sealing, rule.levels, mark, tuple(sorted(runs, key=lambda r: r.bucket)))

    def folds(self, eligible: SegmentColumns, table: str) -> list[MergePlan]:
        """A fold per due run whose segments are all eligible, no two sharing a segment."""
        plans: list[MergePlan] = []
        taken: set[str] = set()
        for run in self.runs:
            ids = {s.id for s in run.members}
            if run.due is None or ids & taken or int(eligible.mask(ids).sum()) < len(ids):
                continue
            plans.append(make_plan(table, RULE, run.members, level=self._label(run.bucket)))
            taken |= ids
        return plans

    def _label(self, span: TimeRange) -> str:
        """`fold:<level>` when the run's segments span one bucket of a level, else `fold`."""
        level = next(
            (lv for lv in sorted(self.levels, key=lambda lv: lv.rank) if bucket(lv, span.start) == span), None
        )
        return FOLD if level is None else f"{FOLD}:{level}"

    def joined(self, plan: MergePlan, eligible_late: Collection[str], taken: set[str]) -> MergePlan:
        """`plan` with the eligible late segments inside its span (not in `taken`) joining it."""
        span = plan.output.range
        extra = [
            s
            for run in self.runs
            for s in run.late
            if s.id in eligible_late and s.id not in taken and span.covers(s.range)
        ]
        if not extra:
            return plan
        taken.update(s.id for s in extra)
        return make_plan(plan.table, plan.rule, (*plan.inputs, *extra), level=plan.level)

    def decisions(self, eligible_late: Collection[str], merge: MergePlan | None) -> list[Decision]:
        """Per eligible late segment: taken by this attempt's `merge`, or waiting, and why."""
        out = []
        for run in self.runs:
            why = run.describe(self.sealing)
            for s in run.late:
                if s.id not in eligible_late:
                    continue
                if merge is not None and s.id in merge.input_ids:
                    out.append(Decision(s.id, RULE, True, None, f"{merge.level}: {why}", merge.plan_id))
                else:
                    out.append(Decision(s.id, RULE, False, SkipReason.LATE_WAITING, why))
        return out


def _connected(lates: list[Segment], hosts: list[npt.NDArray[np.int64]]) -> list[list[int]]:
    """The late segments grouped: two are together when they overlap or share a host segment."""
    parent = list(range(len(lates)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_on: dict[int, int] = {}  # host row -> the first late segment on it
    for i, rows in enumerate(hosts):
        for row in rows.tolist():
            parent[root(i)] = root(first_on.setdefault(row, i))
    for i, j in itertools.combinations(range(len(lates)), 2):
        if lates[i].range.overlaps(lates[j].range):
            parent[root(i)] = root(j)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(lates)):
        groups[root(i)].append(i)
    return list(groups.values())


def _run(
    span: TimeRange,
    late: tuple[Segment, ...],
    base: tuple[Segment, ...],
    mark: float | None,
    sealing: Sealing,
) -> LateRun:
    sealed = mark is not None and span.end_ts <= mark
    run = LateRun(span, late, base, sealed, None)
    if len(late) >= sealing.max_late_segments:
        due: str | None = "ceiling"
    elif not sealed:
        due = "open"
    elif run.late_bytes >= sealing.late_fold_ratio * run.base_bytes:
        due = "ratio"
    else:
        due = None
    return LateRun(span, late, base, sealed, due)


def sealing_rule(rules: Iterable[RuleConfig]) -> AutoMergeRule | None:
    """The table's time-layer rule when it accepts late data."""
    return next((r for r in rules if isinstance(r, AutoMergeRule) and r.sealing is not None), None)


def refusal(segment: Segment, rule: AutoMergeRule | None) -> str | None:
    """Why a segment overlapping data already there cannot be taken as late data (None: it can)."""
    if rule is None:
        return "this table's rules need disjoint time ranges (auto_merge `sealing` accepts late loads)"
    if segment.origin is not Origin.LOAD:
        return "only loads can be late data"
    level = largest_first(rule.levels)[0]
    home = bucket(level, segment.start)
    if not home.covers(segment.range):
        return f"a late load must lie within one {level} bucket, and it crosses {home.end.isoformat()}"
    return None


def of_table(segments: Sequence[Segment], rules: Iterable[RuleConfig]) -> LateData | None:
    """A table's late data over all its segments (None: the table does not seal)."""
    rule = sealing_rule(rules)
    if rule is None or rule.sealing is None:
        return None
    columns = SegmentColumns.of(segments)
    return LateData.of(columns, rule, watermark(columns, rule.sealing))


def summary(segments: Sequence[Segment], rules: Iterable[RuleConfig]) -> dict[str, Any] | None:
    """A table's late data for `status` (None: the table does not seal)."""
    late = of_table(segments, rules)
    if late is None:
        return None
    return {
        "watermark": None
        if late.watermark is None
        else datetime.fromtimestamp(late.watermark, UTC).isoformat(),
        "late_segments": sum(len(run.late) for run in late.runs),
        "late_bytes": sum(run.late_bytes for run in late.runs),
        "buckets": [
            {
                "bucket": str(run.bucket),
                "sealed": run.sealed,
                "late_segments": len(run.late),
                "late_bytes": run.late_bytes,
                "bucket_bytes": run.base_bytes,
                "folds_now": run.due,
            }
            for run in late.runs
        ],
    }

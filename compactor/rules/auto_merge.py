"""Time-layer auto-merge (seed 000, Apache Kylin).

An attempt walks the selected levels from the largest down. At each level,
segments that cover their whole bucket or cross a bucket boundary are at or
above the threshold and are skipped. A run of the remaining contiguous segments
(same schema version, same sub-partitions, all in one bucket) merges when it
reaches the bucket's end and starts at the bucket's start, at the end of an
adjacent skipped segment, or where the table's first segment begins. At most one
merge per attempt: the merge's own completion event triggers the next attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from compactor.calendar import Level, bucket, largest_first
from compactor.config import AutoMergeRule
from compactor.domain import Decision, RuleOutcome, Segment, SkipReason, make_plan

RULE = "auto_merge"


def at_or_above(segment: Segment, level: Level) -> bool:
    """True when the segment already covers its bucket or crosses a bucket boundary."""
    home = bucket(level, segment.start)
    return segment.end > home.end or (segment.start == home.start and segment.end == home.end)


_DAY = 86400.0


class _Bounds:
    """Bucket bounds in epoch seconds, memoised per calendar day (the planner's hot path)."""

    def __init__(self, level: Level) -> None:
        self.level = level
        self.by_day: dict[int, tuple[float, float]] = {}

    def __call__(self, ts: float, instant: datetime) -> tuple[float, float]:
        if self.level is Level.HOUR:
            start = ts - ts % 3600.0
            return start, start + 3600.0
        day = int(ts // _DAY)
        found = self.by_day.get(day)
        if found is None:
            home = bucket(self.level, instant)
            found = self.by_day[day] = (home.start.timestamp(), home.end.timestamp())
        return found


def plan(
    segments: Sequence[Segment],
    rule: AutoMergeRule,
    table: str,
    table_start: datetime | None,
    explain: bool = True,
) -> RuleOutcome:
    """One attempt over the eligible `segments` of `table`.

    `table_start` is where the table's first segment begins (over all segments,
    eligible or not): a run may start there without reaching back to its bucket's
    start. Times are compared as epoch seconds; decisions are built only when
    `explain` is set, so the streaming hot path stays linear and cheap.
    """
    ordered = sorted(segments, key=lambda s: (s.start, s.end, s.id))
    starts = [s.start.timestamp() for s in ordered]
    ends = [s.end.timestamp() for s in ordered]
    first = table_start.timestamp() if table_start is not None else None
    decisions: dict[str, Decision] = {}
    for level in largest_first(rule.levels):
        bounds = _Bounds(level)
        homes = [bounds(starts[i], s.start) for i, s in enumerate(ordered)]
        skipped_ends: set[float] = set()
        run: list[int] = []
        for i in range(len(ordered) + 1):
            if i < len(ordered):
                hs, he = homes[i]
                if ends[i] > he or (starts[i] == hs and ends[i] == he):
                    skipped_ends.add(ends[i])
                    if explain:
                        s = ordered[i]
                        decisions[s.id] = Decision(
                            s.id, RULE, False, SkipReason.AT_OR_ABOVE_THRESHOLD,
                            f"{level}: already spans {bucket(level, s.start)} or more",
                        )  # fmt: skip
                    continue
                if run and _joins(ordered, starts, ends, homes, run[-1], i):
                    run.append(i)
                    continue
            if run:
                outcome = _judge(
                    ordered, starts, ends, homes, run, skipped_ends, first, level, table, decisions, explain
                )
                if outcome is not None:
                    return outcome
            run = [i]
    return RuleOutcome((), tuple(decisions.values()))


def _joins(
    ordered: Sequence[Segment],
    starts: list[float],
    ends: list[float],
    homes: list[tuple[float, float]],
    prev: int,
    i: int,
) -> bool:
    """Does segment i continue the run ending with `prev` (contiguous, same bucket, same kind)?"""
    a, b = ordered[prev], ordered[i]
    return (
        starts[i] == ends[prev]
        and homes[i] == homes[prev]
        and a.schema_version == b.schema_version
        and a.sub_partitions == b.sub_partitions
    )


def _judge(
    ordered: Sequence[Segment],
    starts: list[float],
    ends: list[float],
    homes: list[tuple[float, float]],
    run: list[int],
    skipped_ends: set[float],
    first: float | None,
    level: Level,
    table: str,
    decisions: dict[str, Decision],
    explain: bool,
) -> RuleOutcome | None:
    """A merge if the run qualifies; otherwise record why not (when explaining)."""
    hs, he = homes[run[0]]
    start, end = starts[run[0]], ends[run[-1]]
    members = [ordered[i] for i in run]
    anchored = start in (hs, first) or start in skipped_ends
    if end == he and len(run) >= 2 and anchored:
        merge = make_plan(table, RULE, members, level=str(level))
        if not explain:
            return RuleOutcome((merge,))
        home = bucket(level, members[0].start)
        chosen = [
            Decision(s.id, RULE, True, None, f"{level}: merges into bucket {home}", merge.plan_id)
            for s in members
        ]
        ids = {s.id for s in members}
        rest = [d for sid, d in decisions.items() if sid not in ids]
        rest += [
            Decision(
                s.id,
                RULE,
                False,
                SkipReason.ONE_MERGE_PER_ATTEMPT,
                f"{merge.plan_id} is this attempt's merge",
            )
            for s in ordered
            if s.id not in ids and s.id not in decisions
        ]
        return RuleOutcome((merge,), tuple(chosen + rest))
    if explain:
        home = bucket(level, members[0].start)
        if end != he:
            reason, detail = (
                SkipReason.INCOMPLETE_BUCKET,
                f"{level}: run ends {members[-1].end.isoformat()}, bucket {home}",
            )
        elif anchored:
            reason, detail = SkipReason.NOTHING_TO_MERGE_WITH, f"{level}: alone in bucket {home}"
        else:
            reason = SkipReason.GAP
            detail = f"{level}: nothing covers [{home.start.isoformat()}, {members[0].start.isoformat()})"
        for s in members:
            decisions[s.id] = Decision(s.id, RULE, False, reason, detail)
    return None

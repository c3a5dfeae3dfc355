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


def _runs(below: Sequence[Segment], level: Level) -> list[list[Segment]]:
    """Maximal contiguous runs inside one bucket with matching versions and sub-partitions."""
    runs: list[list[Segment]] = []
    for segment in below:
        if runs:
            last = runs[-1][-1]
            if (
                segment.start == last.end
                and bucket(level, segment.start) == bucket(level, last.start)
                and segment.schema_version == last.schema_version
                and segment.sub_partitions == last.sub_partitions
            ):
                runs[-1].append(segment)
                continue
        runs.append([segment])
    return runs


def plan(
    segments: Sequence[Segment],
    rule: AutoMergeRule,
    table: str,
    table_start: datetime | None,
) -> RuleOutcome:
    """One attempt over the eligible `segments` of `table`.

    `table_start` is where the table's first segment begins (over all segments,
    eligible or not): a run may start there without reaching back to its bucket's start.
    """
    ordered = sorted(segments, key=lambda s: (s.start, s.end, s.id))
    decisions: dict[str, Decision] = {}
    for level in largest_first(rule.levels):
        above = [s for s in ordered if at_or_above(s, level)]
        below = [s for s in ordered if not at_or_above(s, level)]
        for s in above:
            decisions[s.id] = Decision(
                s.id, RULE, False, SkipReason.AT_OR_ABOVE_THRESHOLD,
                f"{level}: already spans {bucket(level, s.start)} or more",
            )  # fmt: skip
        skipped_ends = {s.end for s in above}
        for run in _runs(below, level):
            home = bucket(level, run[0].start)
            start, end = run[0].start, run[-1].end
            anchored = start == home.start or start in skipped_ends or start == table_start
            if end != home.end:
                reason, detail = (
                    SkipReason.INCOMPLETE_BUCKET,
                    f"{level}: run ends {end.isoformat()}, bucket {home}",
                )
            elif not anchored:
                reason, detail = (
                    SkipReason.GAP,
                    f"{level}: nothing covers [{home.start.isoformat()}, {start.isoformat()})",
                )
            elif len(run) < 2:
                reason, detail = SkipReason.NOTHING_TO_MERGE_WITH, f"{level}: alone in bucket {home}"
            else:
                merge = make_plan(table, RULE, run, level=str(level))
                chosen = [
                    Decision(s.id, RULE, True, None, f"{level}: merges into bucket {home}", merge.plan_id)
                    for s in run
                ]
                rest = [d for sid, d in decisions.items() if sid not in {s.id for s in run}]
                return RuleOutcome((merge,), tuple(chosen + rest))
            for s in run:
                decisions[s.id] = Decision(s.id, RULE, False, reason, detail)
    return RuleOutcome((), tuple(decisions.values()))

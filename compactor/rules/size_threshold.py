"""Size-threshold (major) compaction, as Apache CarbonData compacts its loads.

Walk the eligible segments oldest first with a running total; a segment that
would bring the total to or above `size_threshold` is skipped and the walk goes
on (as CarbonData's documentation says; its code stops at the first overflow). All the
collected segments, at least two, merge into one.

Near new segments (`around`): the walk's choice of a segment depends only on the
segments collected before it, and on a table where nothing waited to merge the walk
collected at most one, the oldest eligible segment under the threshold. Up to the first
new segment (in load order) the walk is as it was; from there any segment under the
threshold may be collected. So that oldest one, the new ones, and the segments under the
threshold loaded since the first new one are all the walk needs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from compactor.config.rules import MajorRule, RuleName
from compactor.domain.columns import Bools, Ints, SegmentColumns, order_by
from compactor.domain.plans import Decision, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment

RULE = RuleName.MAJOR


def plan(segments: Sequence[Segment], rule: MajorRule, table: str, explain: bool = True) -> RuleOutcome:
    columns = SegmentColumns.of(segments)
    order = order_by(columns.loaded, columns)  # oldest first, ties by id
    sizes = columns.size[order]
    taken = walk(sizes, rule.size_threshold)
    collected = columns.pick(order[taken])
    total = int(sizes[taken].sum())
    skipped: list[Decision] = []
    if explain:
        before = np.cumsum(np.where(taken, sizes, 0)) - np.where(taken, sizes, 0)  # the total reached
        for i in np.flatnonzero(~taken).tolist():
            s = columns[int(order[i])]
            detail = f"{before[i]} + {s.bytes} bytes would reach the threshold {rule.size_threshold}"
            skipped.append(Decision(s.id, RULE, False, SkipReason.ABOVE_SIZE_THRESHOLD, detail))
    if len(collected) < 2:
        if not explain:
            return RuleOutcome()
        alone = [
            Decision(
                s.id,
                RULE,
                False,
                SkipReason.NOTHING_TO_MERGE_WITH,
                "no other segment fits under the threshold",
            )
            for s in collected
        ]
        return RuleOutcome((), tuple(skipped + alone))
    merge = make_plan(table, RULE, collected)
    if not explain:
        return RuleOutcome((merge,))
    chosen = [Decision(s.id, RULE, True, None, f"{total} bytes in total", merge.plan_id) for s in collected]
    return RuleOutcome((merge,), tuple(chosen + skipped))


def around(
    segments: SegmentColumns,
    near: Collection[Segment],
    rule: MajorRule,
    passes: Callable[[SegmentColumns], Bools],
) -> SegmentColumns:
    """What the walk needs after `near` arrived on a settled table (see the module); `segments`
    is the whole table, `passes` says which of them the rule may consider."""
    small = segments.size < rule.size_threshold
    loaded = segments.loaded
    keep = np.zeros(len(segments), np.bool_)
    if near:
        keep |= small & (loaded >= min(s.loaded_at.timestamp() for s in near))  # ties: a few more
        keep[segments.positions({s.id for s in near})] = True
    candidates = small & passes(segments)
    first_loaded = np.where(candidates, loaded, np.inf).min(initial=np.inf)  # no gather of the rows
    keep |= candidates & (loaded == first_loaded)  # the oldest, and any tied with it
    return segments.take(keep)


def walk(sizes: Ints, threshold: int) -> Bools:
    """Which of `sizes`, walked in order, are collected: one that would bring the running
    total to or above `threshold` is skipped.

    Runs of collected sizes are found on the prefix sums by binary search, and the
    next size that still fits by a galloping scan, so the loop turns once per run.
    """
    taken = np.zeros(len(sizes), np.bool_)
    prefix = np.cumsum(sizes)
    total, at, n = 0, 0, len(sizes)
    while at < n:
        before = int(prefix[at - 1]) if at else 0
        end = int(np.searchsorted(prefix, threshold - total + before, side="left"))  # first misfit
        taken[at:end] = True
        total += (int(prefix[end - 1]) if end else 0) - before
        room = threshold - total
        at = _first_below(sizes, room, end + 1)  # sizes[end] did not fit
    return taken


def _first_below(values: Ints, limit: int, start: int) -> int:
    """The first position from `start` whose value is below `limit` (len: none), looked for
    in doubling chunks so that a near hit costs little."""
    width, chunk_start, n = 64, start, len(values)
    while chunk_start < n:
        chunk_end = min(n, chunk_start + width)
        hits = np.flatnonzero(values[chunk_start:chunk_end] < limit)
        if len(hits):
            return chunk_start + int(hits[0])
        chunk_start, width = chunk_end, 2 * width
    return n

"""Bin-pack merging with pools (Hydrolix's merge pools).

A segment belongs to the first pool whose age range (age = now - end), size
limit and width limit it fits; a segment fitting no pool waits. Within a pool,
segments (with the same schema version and sub-partitions) are packed into the
fewest merges whose output stays within the pool's size and width limits. A
bin of one segment is not a merge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np

from compactor.config.rules import BinPackRule, PoolConfig, RuleName
from compactor.domain.columns import Floats, Ints, SegmentColumns, order_by
from compactor.domain.plans import Decision, MergePlan, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment
from compactor.rules.bin_packing import pack_indices

RULE = RuleName.BIN_PACK


def pool_for(segment: Segment, pools: Sequence[PoolConfig], now: datetime) -> PoolConfig | None:
    age = now - segment.end
    for pool in pools:
        if (
            pool.min_age <= age < pool.max_age
            and segment.bytes <= pool.max_size
            and segment.range.duration <= pool.max_width
        ):
            return pool
    return None


def _classify(start: Floats, end: Floats, size: Ints, pools: Sequence[PoolConfig], now: datetime) -> Ints:
    """Index of each segment's pool (-1: none), as `pool_for` decides, vectorised."""
    age, width = now.timestamp() - end, end - start
    assigned = np.full(len(start), -1, dtype=np.int64)
    for k, pool in enumerate(pools):
        fits = (
            (assigned < 0)
            & (age >= pool.min_age.total_seconds())
            & (age < pool.max_age.total_seconds())
            & (size <= pool.max_size)
            & (width <= pool.max_width.total_seconds())
        )
        assigned[fits] = k
    return assigned


def _groups(order: Ints, keys: Ints) -> list[Ints]:
    """`order` split by equal `keys` (small non-negative codes), keeping its order within and
    between groups (by first member)."""
    if len(keys) == 0 or keys.min() == keys.max():
        return [order] if len(order) else []  # one pool, one schema version: no sort needed
    # numpy's stable sort is a linear radix sort for 16-bit integers, a merge sort otherwise.
    by_key = np.argsort(keys.astype(np.int16) if keys.max() < 2**15 else keys, kind="stable")
    counts = np.bincount(keys)
    ends = np.cumsum(counts)
    runs = [
        by_key[end - count : end] for count, end in zip(counts.tolist(), ends.tolist(), strict=True) if count
    ]
    runs.sort(key=lambda run: int(run[0]))  # groups in the order of their first member
    return [order[run] for run in runs]


def _no_pool(s: Segment, pools: Sequence[PoolConfig], now: datetime) -> Decision:
    age, width = now - s.end, s.range.duration
    by_age_and_size = [p for p in pools if p.min_age <= age < p.max_age and s.bytes <= p.max_size]
    if by_age_and_size and all(width > p.max_width for p in by_age_and_size):
        widths = ", ".join(f"{p.name} {p.max_width}" for p in by_age_and_size)
        detail = f"width {width} is over the max_width of every pool its age and size fit ({widths})"
        return Decision(s.id, RULE, False, SkipReason.POOL_WIDTH, detail)
    return Decision(
        s.id, RULE, False, SkipReason.NO_POOL, f"age {age}, {s.bytes} bytes, width {width} fit no pool"
    )


def _alone(s: Segment, pool: PoolConfig) -> Decision:
    width = s.range.duration
    if width >= pool.max_width:  # any neighbour that does not overlap it would widen the bin past the limit
        detail = f"pool {pool.name}: a {width} segment fills the pool's max_width {pool.max_width}; no neighbour fits"
        return Decision(s.id, RULE, False, SkipReason.POOL_WIDTH, detail)
    detail = f"pool {pool.name}: no partner fits within {pool.max_size} bytes and {pool.max_width}"
    return Decision(s.id, RULE, False, SkipReason.POOL_LIMIT, detail)


def around(eligible: SegmentColumns, touched: Iterable[Segment], rule: BinPackRule) -> SegmentColumns:
    """The eligible segments that could share a bin with one of the `touched` ones.

    On a settled table (no bin of two), first- and best-fit decreasing place every
    segment lighter than a new one as before, except that they may join the new
    one's bin; so only its bin can newly hold two, and a bin's members lie within
    its pool's `max_width` of each other.
    """
    width = max(p.max_width for p in rule.pools).total_seconds()
    keep = np.zeros(len(eligible), np.bool_)
    for s in touched:
        keep |= (eligible.start >= s.range.end_ts - width) & (eligible.end <= s.range.start_ts + width)
    return eligible.take(keep)


def plan(
    segments: Sequence[Segment], rule: BinPackRule, table: str, now: datetime, explain: bool = True
) -> RuleOutcome:
    decisions: list[Decision] = []
    columns = SegmentColumns.of(segments)
    start, end, size = columns.start, columns.end, columns.size
    assigned = _classify(start, end, size, rule.pools, now)
    order = order_by(start, columns)  # by start, ties by id
    if explain:
        decisions += [_no_pool(s, rule.pools, now) for s in columns.pick(order[assigned[order] < 0])]
    order = order[assigned[order] >= 0]
    codes = columns.group[order]  # (schema version, sub-partitions, indexes): only equal codes merge
    plans: list[MergePlan] = []
    for members in _groups(order, assigned[order] * (int(codes.max(initial=0)) + 1) + codes):
        pool = rule.pools[int(assigned[members[0]])]
        bins = pack_indices(
            size[members],
            start[members],
            end[members],
            pool.max_size,
            rule.strategy,
            pool.max_width.total_seconds(),
            singletons=explain,
        )
        for bin_ in bins:
            if len(bin_) < 2:
                if explain:
                    decisions.append(_alone(columns[int(members[bin_[0]])], pool))
                continue
            inputs = columns.pick(members[bin_])
            merge = make_plan(table, RULE, inputs, pool=pool.name)
            plans.append(merge)
            if explain:
                total = sum(s.bytes for s in inputs)
                decisions += [
                    Decision(s.id, RULE, True, None, f"pool {pool.name}: bin of {total} bytes", merge.plan_id)
                    for s in inputs
                ]
    return RuleOutcome(tuple(plans), tuple(decisions))

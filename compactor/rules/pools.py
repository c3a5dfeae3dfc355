"""Bin-pack merging with pools (seed 003, Hydrolix).

A segment belongs to the first pool whose age range (age = now - end), size
limit and width limit it fits; a segment fitting no pool waits. Within a pool,
segments (with the same schema version and sub-partitions) are packed into the
fewest merges whose output stays within the pool's size and width limits. A
bin of one segment is not a merge.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from compactor.config import BinPackRule, PoolConfig
from compactor.domain import Decision, MergePlan, RuleOutcome, Segment, SkipReason, make_plan
from compactor.rules.bin_packing import pack

RULE = "bin_pack"


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


def _starts(segments: Sequence[Segment]) -> npt.NDArray[np.float64]:
    return np.fromiter((s.range.start_ts for s in segments), np.float64, len(segments))


def _classify(
    segments: Sequence[Segment], pools: Sequence[PoolConfig], now: datetime
) -> npt.NDArray[np.int64]:
    """Index of each segment's pool (-1: none), as `pool_for` decides, vectorised."""
    n = len(segments)
    start = _starts(segments)
    end = np.fromiter((s.range.end_ts for s in segments), np.float64, n)
    size = np.fromiter((s.bytes for s in segments), np.int64, n)
    age, width = now.timestamp() - end, end - start
    assigned = np.full(n, -1, dtype=np.int64)
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


def plan(
    segments: Sequence[Segment], rule: BinPackRule, table: str, now: datetime, explain: bool = True
) -> RuleOutcome:
    decisions: list[Decision] = []
    groups: dict[tuple[str, int, frozenset[str]], list[Segment]] = defaultdict(list)
    pools = {p.name: p for p in rule.pools}
    assigned = _classify(segments, rule.pools, now)
    for i in np.lexsort((np.array([s.id for s in segments], dtype=str), _starts(segments))):
        s = segments[i]
        if assigned[i] < 0:
            if explain:
                decisions.append(
                    Decision(
                        s.id,
                        RULE,
                        False,
                        SkipReason.NO_POOL,
                        f"age {now - s.end}, {s.bytes} bytes, width {s.range.duration} fit no pool",
                    )
                )
            continue
        groups[(rule.pools[assigned[i]].name, s.schema_version, s.sub_partitions)].append(s)
    plans: list[MergePlan] = []
    for (pool_name, _, _), members in groups.items():
        pool = pools[pool_name]

        bins = pack(
            members,
            lambda s: s.bytes,
            pool.max_size,
            rule.strategy,
            span=lambda s: (s.start.timestamp(), s.end.timestamp()),
            max_span=pool.max_width.total_seconds(),
        )
        for bin_ in bins:
            if len(bin_) < 2:
                if not explain:
                    continue
                decisions.append(
                    Decision(
                        bin_[0].id,
                        RULE,
                        False,
                        SkipReason.POOL_LIMIT,
                        f"pool {pool_name}: no partner fits within {pool.max_size} bytes and {pool.max_width}",
                    )
                )
                continue
            merge = make_plan(table, RULE, bin_, pool=pool_name)
            plans.append(merge)
            if not explain:
                continue
            size = sum(s.bytes for s in bin_)
            decisions += [
                Decision(s.id, RULE, True, None, f"pool {pool_name}: bin of {size} bytes", merge.plan_id)
                for s in bin_
            ]
    return RuleOutcome(tuple(plans), tuple(decisions))

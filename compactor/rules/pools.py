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


def plan(
    segments: Sequence[Segment], rule: BinPackRule, table: str, now: datetime, explain: bool = True
) -> RuleOutcome:
    decisions: list[Decision] = []
    groups: dict[tuple[str, int, frozenset[str]], list[Segment]] = defaultdict(list)
    pools = {p.name: p for p in rule.pools}
    for s in sorted(segments, key=lambda s: (s.start, s.id)):
        pool = pool_for(s, rule.pools, now)
        if pool is None:
            if not explain:
                continue
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
        groups[(pool.name, s.schema_version, s.sub_partitions)].append(s)
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

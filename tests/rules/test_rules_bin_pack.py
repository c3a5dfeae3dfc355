"""Seed 003 (Hydrolix): pools by age/size/width and first-fit / best-fit bin packing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from compactor.config.loading import load_config
from compactor.config.rules import DEFAULT_POOLS, BinPackRule, PoolConfig
from compactor.config.tables import TableSettings
from compactor.domain.plans import MergePlan, SkipReason
from compactor.domain.segments import Segment, TimeRange
from compactor.rules.bin_packing import pack, pack_indices
from compactor.rules.engine import Evaluation, evaluate
from compactor.rules.pools import pool_for
from compactor.rules.simulation import Simulation
from tests.helpers.segments import hours, seg

MB = 1024 * 1024
GB = 1024 * MB
NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def part(sid: str, age: timedelta, width: timedelta, size: int, **kw: Any) -> Segment:
    """A partition whose newest timestamp is `age` before NOW."""
    end = NOW - age
    kw.setdefault("loaded_at", end)
    return Segment(id=sid, table="t", range=TimeRange(end - width, end), bytes=size, **kw)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def settings(strategy: str = "first_fit", pools: list[dict[str, Any]] | None = None) -> TableSettings:
    rule: dict[str, Any] = {"rule": "bin_pack", "strategy": strategy}
    if pools is not None:
        rule["pools"] = pools
    return load_config({"defaults": {"rules": [rule]}}).defaults


def bins(evaluation: Evaluation) -> set[frozenset[str]]:
    return {frozenset(p.input_ids) for p in evaluation.plans}


def reasons(evaluation: Evaluation) -> dict[str, SkipReason | None]:
    return {d.segment_id: d.reason for d in evaluation.decisions}


def pool_named(name: str, pools: Sequence[PoolConfig] = DEFAULT_POOLS) -> PoolConfig:
    return next(p for p in pools if p.name == name)


# --- the default pools ------------------------------------------------------------------------


def test_default_pools_are_the_seed_table() -> None:
    small, medium, large = DEFAULT_POOLS
    assert (small.name, small.min_age, small.max_age, small.max_size, small.max_width) == (
        "small",
        timedelta(0),
        minutes(10),
        1 * GB,
        timedelta(hours=1),
    )
    assert (medium.name, medium.min_age, medium.max_age, medium.max_size, medium.max_width) == (
        "medium",
        minutes(10),
        minutes(70),
        2 * GB,
        timedelta(hours=1),
    )
    assert (large.name, large.min_age, large.max_age, large.max_size, large.max_width) == (
        "large",
        minutes(70),
        timedelta(days=90),
        4 * GB,
        timedelta(hours=1),
    )
    rule = settings().rules[0]
    assert isinstance(rule, BinPackRule)
    assert rule.pools == DEFAULT_POOLS
    assert rule.strategy == "first_fit"


def test_seed_513mb_37min_wide_15min_old_is_medium() -> None:
    segment = part("p", minutes(15), minutes(37), 513 * MB)
    pool = pool_for(segment, DEFAULT_POOLS, NOW)
    assert pool is not None
    assert pool.name == "medium"


def test_seed_513mb_segment_merges_in_medium_with_a_partner() -> None:
    seed = part("p", minutes(15), minutes(37), 513 * MB)
    partner = part("q", minutes(12), minutes(3), 200 * MB)  # [now-15m, now-12m): right after p
    evaluation = evaluate("t", [seed, partner], settings(), NOW)
    (plan,) = evaluation.plans
    assert plan.rule == "bin_pack"
    assert plan.pool == "medium"
    assert plan.input_ids == ("p", "q")
    assert plan.output.bytes == 713 * MB
    assert plan.output.range == TimeRange(NOW - minutes(52), NOW - minutes(12))


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (timedelta(0), "small"),
        (minutes(9.99), "small"),
        (minutes(10), "medium"),
        (minutes(69.99), "medium"),
        (minutes(70), "large"),
        (timedelta(days=89, hours=23), "large"),
        (timedelta(days=90), None),
        (timedelta(days=91), None),
        (-minutes(1), None),  # data from the future fits no age range
    ],
)
def test_pool_by_age(age: timedelta, expected: str | None) -> None:
    pool = pool_for(part("p", age, minutes(5), 100 * MB), DEFAULT_POOLS, NOW)
    assert (pool.name if pool else None) == expected


@pytest.mark.parametrize(
    ("age", "size", "width", "expected"),
    [
        (minutes(5), 1 * GB, minutes(60), "small"),
        (minutes(5), 1 * GB + 1, minutes(10), None),  # too big for small, too young for medium
        (minutes(5), 100 * MB, minutes(61), None),  # too wide for every pool
        (minutes(15), 2 * GB, minutes(10), "medium"),
        (minutes(15), 2 * GB + 1, minutes(10), None),
        (minutes(80), 4 * GB, minutes(10), "large"),
        (minutes(80), 4 * GB + 1, minutes(10), None),
        (minutes(80), 10 * MB, minutes(61), None),
    ],
)
def test_pool_by_size_and_width(age: timedelta, size: int, width: timedelta, expected: str | None) -> None:
    pool = pool_for(part("p", age, width, size), DEFAULT_POOLS, NOW)
    assert (pool.name if pool else None) == expected


# --- the 2.5 GB partition ------------------------------------------------------------------------

BIG = int(2.5 * GB)


def test_seed_2_5gb_at_15_minutes_fits_no_pool() -> None:
    big = part("big", minutes(15), minutes(20), BIG)
    assert pool_for(big, DEFAULT_POOLS, NOW) is None
    partner = part("small", minutes(16), minutes(1), 10 * MB)
    evaluation = evaluate("t", [big, partner], settings(), NOW)
    assert evaluation.plans == ()
    why = reasons(evaluation)
    assert why["big"] is SkipReason.NO_POOL
    assert why["small"] is SkipReason.POOL_LIMIT  # medium pool, nobody to merge with


@pytest.mark.parametrize("strategy", ["first_fit", "best_fit"])
def test_seed_2_5gb_at_71_minutes_merges_only_with_partners_up_to_1_5gb(strategy: str) -> None:
    big = part("big", minutes(111), minutes(20), BIG)  # [now-131m, now-111m)
    one = part("one", minutes(101), minutes(10), 1 * GB)
    six = part("six", minutes(71), minutes(30), int(0.6 * GB))
    for s in (big, one, six):
        assert pool_for(s, DEFAULT_POOLS, NOW) == pool_named("large")
    evaluation = evaluate("t", [big, one, six], settings(strategy), NOW)
    assert bins(evaluation) == {frozenset({"big", "one"})}
    (plan,) = evaluation.plans
    assert plan.pool == "large"
    assert plan.output.bytes == BIG + GB <= 4 * GB
    assert reasons(evaluation)["six"] is SkipReason.POOL_LIMIT


def test_seed_2_5gb_at_71_minutes_old() -> None:
    big = part("big", minutes(71), minutes(20), BIG)
    pool = pool_for(big, DEFAULT_POOLS, NOW)
    assert pool is not None
    assert pool.name == "large"
    evaluation = evaluate("t", [big], settings(), NOW)
    assert evaluation.plans == ()
    assert reasons(evaluation) == {"big": SkipReason.POOL_LIMIT}


def test_partners_totalling_exactly_1_5gb_all_fit() -> None:
    big = part("big", minutes(111), minutes(20), BIG)
    one = part("one", minutes(101), minutes(10), 1 * GB)
    half = part("half", minutes(71), minutes(30), GB // 2)
    evaluation = evaluate("t", [big, one, half], settings(), NOW)
    (plan,) = evaluation.plans
    assert set(plan.input_ids) == {"big", "one", "half"}
    assert plan.output.bytes == 4 * GB


def test_partner_of_1_5gb_plus_one_byte_does_not_fit() -> None:
    big = part("big", minutes(111), minutes(20), BIG)
    partner = part("partner", minutes(101), minutes(10), int(1.5 * GB) + 1)
    evaluation = evaluate("t", [big, partner], settings(), NOW)
    assert evaluation.plans == ()
    assert reasons(evaluation) == {"big": SkipReason.POOL_LIMIT, "partner": SkipReason.POOL_LIMIT}


def test_older_than_90_days_is_not_considered() -> None:
    old = [part(f"o{i}", timedelta(days=90, minutes=i), minutes(1), MB) for i in range(3)]
    recent = [part(f"r{i}", timedelta(days=89, minutes=i), minutes(1), MB) for i in range(2)]
    evaluation = evaluate("t", old + recent, settings(), NOW)
    assert bins(evaluation) == {frozenset({"r0", "r1"})}
    why = reasons(evaluation)
    assert {why[s.id] for s in old} == {SkipReason.NO_POOL}


# --- packing -----------------------------------------------------------------------------------


def test_pack_first_fit_vs_best_fit() -> None:
    sizes = [1, 9, 12, 10]  # placed largest first: 12, 10, 9, 1
    first = pack(sizes, lambda x: x, 20, "first_fit")
    best = pack(sizes, lambda x: x, 20, "best_fit")
    assert first == [[12, 1], [10, 9]]  # 1 goes to the first bin with room
    assert best == [[12], [10, 9, 1]]  # 1 goes to the fullest bin it fits


def test_pack_oversized_item_gets_its_own_bin_and_ties_keep_input_order() -> None:
    assert pack([5, 30, 5], lambda x: x, 10, "first_fit") == [[30], [5, 5]]
    items = [("a", 3), ("b", 3), ("c", 3)]
    assert pack(items, lambda x: x[1], 6, "best_fit") == [[("a", 3), ("b", 3)], [("c", 3)]]


def test_pack_respects_the_span_limit() -> None:
    # (start, end, size): 0-10 and 50-60 are too far apart for one bin of span 30
    items = [(0, 10, 4), (50, 60, 3), (15, 25, 2), (40, 45, 1)]
    got = pack(items, lambda x: x[2], 100, "first_fit", span=lambda x: (x[0], x[1]), max_span=30)
    assert got == [[(0, 10, 4), (15, 25, 2)], [(50, 60, 3), (40, 45, 1)]]
    # a bin's hull may equal the limit exactly
    exact = pack(items[:3], lambda x: x[2], 100, "best_fit", span=lambda x: (x[0], x[1]), max_span=60)
    assert exact == [[(0, 10, 4), (50, 60, 3), (15, 25, 2)]]
    assert pack([], lambda x: x, 10, "best_fit") == []


def brute_force_pack(
    items: Sequence[tuple[int, int, int]], capacity: int, strategy: str, limit: float
) -> list[list[tuple[int, int, int]]]:
    """First fit / best fit by scanning every bin, items (start, end, size) heaviest first."""
    bins: list[list[tuple[int, int, int]]] = []
    for item in sorted(items, key=lambda x: -x[2]):  # stable: ties keep input order
        best = None
        for b, members in enumerate(bins):
            hull = max(item[1], *(m[1] for m in members)) - min(item[0], *(m[0] for m in members))
            if sum(m[2] for m in members) + item[2] > capacity or hull > limit:
                continue
            if strategy == "first_fit":
                best = b
                break
            if best is None or sum(m[2] for m in members) > sum(m[2] for m in bins[best]):
                best = b
        if best is None:
            bins.append([item])
        else:
            bins[best].append(item)
    return bins


def test_pack_with_a_span_matches_a_brute_force_packer() -> None:
    """Many items far apart in time: the result equals a plain first-fit/best-fit search over all bins."""
    items = [((i * 37) % 500, (i * 37) % 500 + 1 + i % 7, 1 + (i * 13) % 17) for i in range(120)]
    for strategy in ("first_fit", "best_fit"):
        got = pack(items, lambda x: x[2], 40, strategy, span=lambda x: (x[0], x[1]), max_span=25)
        assert got == brute_force_pack(items, 40, strategy, 25)


@given(
    items=st.lists(
        st.tuples(st.integers(0, 300), st.integers(1, 40), st.integers(1, 120)).map(
            lambda t: (t[0], t[0] + t[1], t[2])
        ),
        max_size=60,
    ),
    capacity=st.integers(20, 100),
    strategy=st.sampled_from(["first_fit", "best_fit"]),
    limit=st.sampled_from([40, 60, 150, float("inf")]),
)
@hypothesis_settings(max_examples=300, deadline=None)
def test_pack_matches_brute_force_with_heavy_and_oversized_items(
    items: list[tuple[int, int, int]], capacity: int, strategy: Literal["first_fit", "best_fit"], limit: float
) -> None:
    """Heavy items (over half the capacity) open bins in a vectorised phase; the result must not change."""
    span = (lambda x: (x[0], x[1])) if limit != float("inf") else None
    got = pack(items, lambda x: x[2], capacity, strategy, span=span, max_span=limit)
    assert got == brute_force_pack(items, capacity, strategy, limit)
    assert sorted(m for b in got for m in b) == sorted(items)  # nothing lost or duplicated
    # the streaming path asks for merges only: the same bins, less those of one item
    merges = pack_indices(
        np.array([x[2] for x in items], np.int64),
        np.array([x[0] for x in items], np.float64),
        np.array([x[1] for x in items], np.float64),
        capacity,
        strategy,
        limit,
        singletons=False,
    )
    assert [[items[i] for i in b] for b in merges] == [b for b in got if len(b) > 1]


POOL_20MB = [{"name": "p", "max_age": "1d", "max_size": "20MB", "max_width": "1d"}]


def sized(sizes_mb: Sequence[int]) -> list[Segment]:
    """Contiguous 1-minute partitions of the given sizes, 1-2 hours old."""
    return [part(f"s{mb}", minutes(60 + i), minutes(1), mb * MB) for i, mb in enumerate(sizes_mb)]


def test_first_fit_and_best_fit_plans_differ() -> None:
    segments = sized([12, 10, 9, 1])
    first = evaluate("t", segments, settings("first_fit", POOL_20MB), NOW)
    best = evaluate("t", segments, settings("best_fit", POOL_20MB), NOW)
    assert bins(first) == {frozenset({"s10", "s9"}), frozenset({"s12", "s1"})}
    assert bins(best) == {frozenset({"s10", "s9", "s1"})}
    assert reasons(best)["s12"] is SkipReason.POOL_LIMIT
    assert all(p.pool == "p" for p in first.plans + best.plans)
    assert all(p.output.bytes <= 20 * MB for p in first.plans + best.plans)


def test_fewest_merges_largest_first() -> None:
    segments = sized([8, 7, 6, 5, 4, 3, 2])  # 35 MB: two bins of at most 20 MB
    evaluation = evaluate("t", segments, settings("first_fit", POOL_20MB), NOW)
    # first fit over 8, 7, 6, 5, 4, 3, 2: 8+7+5 fill the first bin, 6+4+3+2 the second
    assert bins(evaluation) == {frozenset({"s6", "s4", "s3", "s2"}), frozenset({"s8", "s7", "s5"})}
    assert sum(p.output.bytes for p in evaluation.plans) == 35 * MB
    assert all(p.output.bytes <= 20 * MB for p in evaluation.plans)


def test_a_bin_of_one_is_not_a_merge() -> None:
    lone = part("lone", minutes(2), minutes(10), 100 * MB)
    evaluation = evaluate("t", [lone], settings(), NOW)
    assert evaluation.plans == ()
    assert reasons(evaluation) == {"lone": SkipReason.POOL_LIMIT}


def test_partitions_in_different_pools_do_not_merge() -> None:
    fresh = part("fresh", minutes(2), minutes(5), 10 * MB)  # small
    older = part("older", minutes(12), minutes(5), 10 * MB)  # medium
    evaluation = evaluate("t", [fresh, older], settings(), NOW)
    assert evaluation.plans == ()
    assert reasons(evaluation) == {"fresh": SkipReason.POOL_LIMIT, "older": SkipReason.POOL_LIMIT}


def test_schema_versions_and_sub_partitions_are_packed_apart() -> None:
    a = part("a", minutes(1), minutes(5), MB, schema_version=1)
    b = part("b", minutes(2), minutes(5), MB, schema_version=2)
    c = part("c", minutes(3), minutes(5), MB, schema_version=1, sub_partitions=frozenset({"x"}))
    d = part("d", minutes(4), minutes(5), MB, schema_version=2)
    evaluation = evaluate("t", [a, b, c, d], settings(), NOW)
    assert bins(evaluation) == {frozenset({"b", "d"})}
    assert reasons(evaluation)["a"] is SkipReason.POOL_LIMIT
    assert reasons(evaluation)["c"] is SkipReason.POOL_LIMIT


# --- width -------------------------------------------------------------------------------------


def test_output_span_stays_within_max_width() -> None:
    """Three contiguous 30-minute partitions in the large pool: only two fit in one hour."""
    a = part("a", minutes(140), minutes(30), 300 * MB)
    b = part("b", minutes(110), minutes(30), 200 * MB)
    c = part("c", minutes(80), minutes(30), 100 * MB)
    evaluation = evaluate("t", [a, b, c], settings(), NOW)
    (plan,) = evaluation.plans
    assert plan.input_ids == ("a", "b")
    assert plan.output.range.duration == timedelta(hours=1)
    assert reasons(evaluation)["c"] is SkipReason.POOL_LIMIT


def test_width_counts_the_gap_between_partitions() -> None:
    """Two 10-minute partitions 50 minutes apart span 70 minutes: no merge."""
    a = part("a", minutes(150), minutes(10), MB)
    b = part("b", minutes(90), minutes(10), MB)
    evaluation = evaluate("t", [a, b], settings(), NOW)
    assert evaluation.plans == ()
    c = part("c", minutes(100), minutes(10), MB)
    (plan,) = evaluate("t", [a, c], settings(), NOW).plans
    assert plan.output.range.duration == timedelta(hours=1)


def plans_respect_pools(plans: Sequence[MergePlan], pools: Sequence[PoolConfig]) -> None:
    for p in plans:
        pool = pool_named(p.pool or "", pools)
        assert p.output.bytes <= pool.max_size
        assert p.output.range.duration <= pool.max_width


def test_many_partitions_respect_width_and_size() -> None:
    segments = [part(f"x{i:02d}", minutes(75 + 7 * i), minutes(7), (50 + 37 * i) * MB) for i in range(40)]
    for strategy in ("first_fit", "best_fit"):
        evaluation = evaluate("t", segments, settings(strategy), NOW)
        assert evaluation.plans
        plans_respect_pools(evaluation.plans, DEFAULT_POOLS)
        ids = [sid for p in evaluation.plans for sid in p.input_ids]
        assert len(ids) == len(set(ids))


# --- custom pools ------------------------------------------------------------------------------


def test_custom_pools_from_config() -> None:
    pools = [
        {"name": "hot", "max_age": "1h", "max_size": "100MB", "max_width": "1d"},
        {"name": "cold", "min_age": "1h", "max_age": "365d", "max_size": "10GB", "max_width": "7d"},
    ]
    config = load_config(
        {
            "tables": {
                "t": {"rules": [{"rule": "bin_pack", "strategy": "best_fit", "pools": pools}]},
            }
        }
    )
    table = config.for_table("t")
    rule = table.rules[0]
    assert isinstance(rule, BinPackRule)
    assert [p.name for p in rule.pools] == ["hot", "cold"]

    hot1 = part("hot1", minutes(5), timedelta(hours=5), 60 * MB)  # too wide for any default pool
    hot2 = part("hot2", minutes(30), timedelta(hours=5), 40 * MB)
    hot3 = part("hot3", minutes(40), timedelta(hours=1), 1 * MB)
    cold1 = part("cold1", timedelta(days=200), timedelta(days=2), 3 * GB)
    cold2 = part("cold2", timedelta(days=198), timedelta(days=2), 3 * GB)
    assert pool_for(hot1, DEFAULT_POOLS, NOW) is None
    assert pool_for(hot1, rule.pools, NOW) == pool_named("hot", rule.pools)
    assert pool_for(cold1, rule.pools, NOW) == pool_named("cold", rule.pools)

    evaluation = evaluate("t", [hot1, hot2, hot3, cold1, cold2], table, NOW)
    assert {(p.pool, frozenset(p.input_ids)) for p in evaluation.plans} == {
        ("hot", frozenset({"hot1", "hot2"})),
        ("cold", frozenset({"cold1", "cold2"})),
    }
    assert reasons(evaluation)["hot3"] is SkipReason.POOL_LIMIT
    plans_respect_pools(evaluation.plans, rule.pools)
    assert [r.rule for r in config.for_table("other").rules] == ["auto_merge"]


def test_first_matching_pool_wins_when_pools_overlap() -> None:
    pools = [
        {"name": "a", "max_age": "1h", "max_size": "10MB", "max_width": "1h"},
        {"name": "b", "max_age": "1h", "max_size": "1GB", "max_width": "1h"},
    ]
    rule = settings(pools=pools).rules[0]
    assert isinstance(rule, BinPackRule)
    small = part("s", minutes(5), minutes(5), 5 * MB)
    big = part("b", minutes(5), minutes(5), 50 * MB)
    assert pool_for(small, rule.pools, NOW) == rule.pools[0]
    assert pool_for(big, rule.pools, NOW) == rule.pools[1]


# --- in the simulation ----------------------------------------------------------------------------


def test_merge_disabled_stops_new_bin_pack_plans() -> None:
    config = load_config({"defaults": {"merge_enabled": False, "rules": [{"rule": "bin_pack"}]}})
    sim = Simulation(config)
    start = NOW - timedelta(hours=1)
    for i in range(6):
        end = start + minutes(5 * (i + 1))
        sim.arrive(
            Segment(id=f"s{i}", table="t", range=TimeRange(end - minutes(5), end), loaded_at=end, bytes=MB)
        )
    assert sim.merges == []
    assert len(sim.catalog.segments("t")) == 6


def test_simulation_packs_fresh_arrivals_in_the_small_pool() -> None:
    sim = Simulation(load_config({"defaults": {"rules": [{"rule": "bin_pack"}]}}))
    start = NOW - timedelta(hours=1)
    for i in range(6):
        end = start + minutes(5 * (i + 1))
        sim.arrive(
            Segment(id=f"s{i}", table="t", range=TimeRange(end - minutes(5), end), loaded_at=end, bytes=MB)
        )
    assert sim.merges
    assert all(p.pool == "small" for p in sim.merges)
    (merged,) = sim.catalog.segments("t")
    assert merged.bytes == 6 * MB
    assert merged.range == TimeRange(start, start + minutes(30))


def test_hourly_segments_never_merge_under_the_default_pools_and_say_why() -> None:
    """Seed 003's pools are at most 1 h wide: two adjacent hourly segments span 2 h."""
    now = datetime(2024, 1, 2, 12, tzinfo=UTC)
    hourly = [hours(f"h{i}", now - timedelta(hours=3 - i)) for i in range(3)]
    daily = seg("d1", "2023-12-31")
    evaluation = evaluate("t", [*hourly, daily], TableSettings(rules=(BinPackRule(rule="bin_pack"),)), now)
    assert evaluation.plans == ()
    reasons = {d.segment_id: d for d in evaluation.decisions}
    assert {reasons[s.id].reason for s in hourly} == {SkipReason.POOL_WIDTH}
    assert "fills the pool's max_width 1:00:00" in reasons["h0"].detail
    assert (
        reasons["d1"].reason is SkipReason.POOL_WIDTH
        and "over the max_width of every pool" in reasons["d1"].detail
    )

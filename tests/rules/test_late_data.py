"""Watermark sealing: late loads wait beside their bucket and fold in by ratio (issue 19, part 3)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.config.loading import load_config
from compactor.config.tables import ProjectConfig
from compactor.domain.columns import SegmentColumns
from compactor.domain.plans import MergePlan, SkipReason
from compactor.domain.segments import Origin, Segment, TimeRange
from compactor.errors import InvalidSegmentError
from compactor.rules.budget import optional
from compactor.rules.coverage import coverage
from compactor.rules.engine import evaluate
from compactor.rules.late_data import late_mask, of_table
from compactor.rules.simulation import Simulation, check_segments

MONDAY = datetime(2024, 1, 1, tzinfo=UTC)  # week 1 is [Jan 1, Jan 8)
WEEK_1 = TimeRange(MONDAY, MONDAY + timedelta(days=7))


def config(levels: tuple[str, ...] = ("day", "week"), **sealing: Any) -> ProjectConfig:
    rule = {"rule": "auto_merge", "levels": list(levels), "sealing": sealing}
    return load_config({"defaults": {"rules": [rule]}})


def load(sid: str, start: datetime, hours: int, size: int, loaded: datetime | None = None) -> Segment:
    span = TimeRange(start, start + timedelta(hours=hours))
    return Segment(sid, "t", span, loaded_at=loaded or span.end + timedelta(hours=1), bytes=size)


def late(sid: str, day: int, size: int, arrives: int) -> Segment:
    """An hour of late rows for day `day` of week 1, arriving on day `arrives`."""
    start = MONDAY + timedelta(days=day, hours=10)
    return load(sid, start, 1, size, loaded=MONDAY + timedelta(days=arrives))


def sealed_week(sim: Simulation, days: int = 7) -> Segment:
    """Week 1 loaded day by day (1,000 bytes each) and merged; then Monday of week 2 seals it."""
    for d in range(days):
        sim.arrive(load(f"d{d}", MONDAY + timedelta(days=d), 24, 1000))
    sim.arrive(load("next", MONDAY + timedelta(days=7), 24, 1000))
    (week,) = [s for s in sim.catalog.segments("t") if s.range == WEEK_1]
    return week


@pytest.mark.parametrize("near", [False, True], ids=["full", "near"])
def test_a_sealed_week_is_rewritten_once_when_its_late_bytes_reach_the_ratio(near: bool) -> None:
    sim = Simulation(config(late_fold_ratio=0.1), local=near)  # near: attempts look near the new load
    week = sealed_week(sim)
    assert [m.level for m in sim.merges] == ["week"]
    sim.arrive(late("L1", 2, 200, arrives=10))
    sim.arrive(late("L2", 4, 200, arrives=11))
    assert len(sim.merges) == 1, "400 of 7,000 bytes late: under 10 %, the week waits"
    assert {s.id for s in sim.catalog.segments("t")} == {week.id, "next", "L1", "L2"}
    sim.arrive(late("L3", 5, 300, arrives=12))  # 700 of 7,000: the fold
    fold = sim.merges[-1]
    assert (fold.level, sorted(fold.input_ids)) == ("fold:week", sorted([week.id, "L1", "L2", "L3"]))
    assert (fold.output.range, fold.output.bytes) == (WEEK_1, 7700)
    assert len(sim.merges) == 2 and [s.range for s in sim.catalog.segments("t")].count(WEEK_1) == 1


def test_a_late_day_of_an_open_month_folds_into_its_week_alone() -> None:
    sim = Simulation(config(("day", "week", "month"), late_fold_ratio=0.1))
    for d in range(15):  # two whole weeks merge; the month is open
        sim.arrive(load(f"d{d}", MONDAY + timedelta(days=d), 24, 1000))
    weeks = sorted(
        (s for s in sim.catalog.segments("t") if s.range.duration == timedelta(days=7)), key=lambda s: s.start
    )
    assert [w.range for w in weeks] == [WEEK_1, TimeRange(WEEK_1.end, WEEK_1.end + timedelta(days=7))]
    sim.arrive(late("L1", 2, 700, arrives=20))
    fold = sim.merges[-1]
    assert (fold.level, sorted(fold.input_ids)) == ("fold:week", sorted([weeks[0].id, "L1"]))
    assert weeks[1] in sim.catalog.segments("t"), "the other week of the month is not rewritten"


def test_waiting_late_data_is_explained_with_its_bucket_and_shares() -> None:
    sim = Simulation(config(late_fold_ratio=0.1))
    sealed_week(sim)
    sim.arrive(late("L1", 2, 200, arrives=10))
    cfg = sim.config.for_table("t")
    decisions = evaluate("t", sim.catalog.segments("t"), cfg, MONDAY + timedelta(days=10)).decisions
    (waiting,) = [d for d in decisions if d.segment_id == "L1"]
    assert waiting.reason is SkipReason.LATE_WAITING
    assert waiting.detail == (
        f"1 late segment(s) of sealed bucket {WEEK_1}: 200 of 7000 bytes (2.9%); folds at 10% or 16 segments"
    )


def test_the_late_segment_ceiling_folds_small_stragglers() -> None:
    sim = Simulation(config(late_fold_ratio=0.5, max_late_segments=3))
    sealed_week(sim)
    for i in range(3):
        sim.arrive(late(f"L{i}", i, 10, arrives=10 + i))
    assert [m.level for m in sim.merges] == ["week", "fold:week"]
    assert sorted(sim.merges[-1].input_ids)[:3] == ["L0", "L1", "L2"]


def test_within_the_allowed_lateness_a_late_load_folds_into_its_merged_bucket_at_once() -> None:
    sim = Simulation(config(allowed_lateness="30d"))
    week = sealed_week(sim)  # merged, but open: the watermark is 30 days behind
    sim.arrive(late("L1", 2, 10, arrives=10))
    assert [m.level for m in sim.merges] == ["week", "fold:week"]
    assert sorted(sim.merges[-1].input_ids) == sorted([week.id, "L1"])


def test_late_data_of_a_bucket_not_merged_yet_joins_the_bucket_merge() -> None:
    sim = Simulation(config())
    for d in range(5):
        sim.arrive(load(f"d{d}", MONDAY + timedelta(days=d), 24, 1000))
    sim.arrive(late("L1", 2, 10, arrives=5))  # overlaps Wednesday, whose week is open and unmerged
    assert sim.merges == []
    for d in (5, 6):
        sim.arrive(load(f"d{d}", MONDAY + timedelta(days=d), 24, 1000))
    (week,) = sim.merges
    assert (week.level, week.output.range) == ("week", WEEK_1)
    assert sorted(week.input_ids) == ["L1", *(f"d{d}" for d in range(7))]


def test_a_fold_is_required_under_a_write_amplification_budget() -> None:
    sim = Simulation(config(late_fold_ratio=0.1))
    sealed_week(sim)
    sim.arrive(late("L1", 2, 5000, arrives=10))
    fold = sim.merges[-1]
    rule = sim.config.for_table("t").rules[0]
    assert fold.level == "fold:week" and not optional(fold, rule)


def test_a_late_load_across_the_bucket_boundary_or_without_sealing_is_refused() -> None:
    week = load("W", MONDAY, 7 * 24, 7000)
    across = load("X", MONDAY + timedelta(days=6, hours=20), 8, 10)  # Sunday into Monday
    with pytest.raises(InvalidSegmentError, match="within one week bucket, and it crosses 2024-01-08"):
        check_segments([week, across], config())
    inside = late("L1", 2, 10, arrives=10)
    check_segments([week, inside], config())
    plain = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["day", "week"]}]}})
    with pytest.raises(InvalidSegmentError, match="overlaps W"):
        check_segments([week, inside], plain)


def test_merge_outputs_rank_before_loads_and_loads_by_load_time() -> None:
    merged = Segment("m", "t", WEEK_1, loaded_at=MONDAY + timedelta(days=30), origin=Origin.MERGE)
    early = late("early", 1, 10, arrives=9)
    later = late("later", 1, 10, arrives=12)  # overlaps `early` and the merge
    apart = load("apart", MONDAY + timedelta(days=7), 24, 10)
    columns = SegmentColumns.of([later, apart, merged, early])
    assert late_mask(columns).tolist() == [True, False, False, True]


spans = st.tuples(st.integers(0, 200), st.integers(1, 40), st.booleans(), st.integers(0, 50))


@given(st.lists(spans, min_size=1, max_size=40))
@settings(max_examples=200, deadline=None)
def test_segments_that_are_not_late_are_pairwise_disjoint(raw: list[tuple[int, int, bool, int]]) -> None:
    segments = [
        Segment(
            f"s{i}",
            "t",
            TimeRange(MONDAY + timedelta(hours=a), MONDAY + timedelta(hours=a + w)),
            loaded_at=MONDAY + timedelta(hours=t),
            origin=Origin.MERGE if merged else Origin.LOAD,
        )
        for i, (a, w, merged, t) in enumerate(raw)
    ]
    flags = late_mask(SegmentColumns.of(segments)).tolist()
    kept = [s for s, f in zip(segments, flags, strict=True) if not f]
    for a, b in itertools.combinations(kept, 2):
        assert not a.range.overlaps(b.range), (a, b)
    for s, f in zip(segments, flags, strict=True):  # a late one overlaps some segment ranked before it
        rank = (s.origin is Origin.LOAD, s.loaded_at, s.id)
        before = [o for o in segments if (o.origin is Origin.LOAD, o.loaded_at, o.id) < rank]
        assert f == any(o.range.overlaps(s.range) for o in before)


@given(
    st.lists(st.integers(1, 3000), min_size=1, max_size=30),
    st.sampled_from([0.05, 0.1, 0.25, 0.5]),
)
@settings(max_examples=100, deadline=None)
def test_each_late_byte_costs_at_most_one_plus_one_over_r_rewrites(sizes: list[int], r: float) -> None:
    """Folds by ratio alone (the ceiling out of reach): the bytes they rewrite are at most
    (1 + 1/r) x the late bytes they take, and the week is never rewritten for less than r of it."""
    sim = Simulation(config(late_fold_ratio=r, max_late_segments=1000))
    sealed_week(sim)
    for i, size in enumerate(sizes):
        sim.arrive(late(f"L{i}", i % 7, size, arrives=10 + i))
    folds: list[MergePlan] = [m for m in sim.merges if m.level == "fold:week"]
    for fold in folds:
        late_bytes = sum(s.bytes for s in fold.inputs if s.id.startswith("L"))
        assert fold.bytes_in <= (1 + 1 / r) * late_bytes + 1e-9
        assert late_bytes >= r * (fold.bytes_in - late_bytes)
    waiting = [s for s in sim.catalog.segments("t") if s.id.startswith("L")]
    (week,) = [s for s in sim.catalog.segments("t") if s.range == WEEK_1]
    assert sum(s.bytes for s in waiting) < r * week.bytes or not waiting
    assert np.isclose(sum(s.bytes for s in sim.catalog.segments("t")), 8000 + sum(sizes))


@st.composite
def days_with_stragglers(draw: st.DrawFn) -> list[Segment]:
    """Whole days loaded in order (some missing), and late hours for days already loaded."""
    present = draw(st.lists(st.booleans(), min_size=7, max_size=24))
    out: list[Segment] = []
    for d, there in enumerate(present):
        if there:
            out.append(load(f"d{d:02d}", MONDAY + timedelta(days=d), 24, draw(st.integers(100, 2000))))
    for k in range(draw(st.integers(0, 8))):
        if not out:
            break
        at = draw(st.integers(0, len(out) - 1))  # arrives after the load at `at`
        days = [s for s in out[: at + 1] if s.id.startswith("d")]
        host = draw(st.sampled_from(days))
        start = host.start + timedelta(hours=draw(st.integers(0, 23)))
        out.insert(at + 1, load(f"late{k}", start, 1, draw(st.integers(1, 600)), loaded=out[at].loaded_at))
    return [replace(s, loaded_at=MONDAY + timedelta(days=40, minutes=i)) for i, s in enumerate(out)]


@given(
    days_with_stragglers(),
    st.sampled_from([("day", "week"), ("week",), ("day", "week", "month")]),
    st.sampled_from([0.05, 0.5, 2.0]),
    st.integers(1, 4),
    st.sampled_from(["0s", "2d"]),
)
@settings(max_examples=150, deadline=None)
def test_with_late_data_near_attempts_merge_what_full_ones_do_and_nothing_is_lost(
    arrivals: list[Segment], levels: tuple[str, ...], ratio: float, ceiling: int, lateness: str
) -> None:
    cfg = config(levels, late_fold_ratio=ratio, max_late_segments=ceiling, allowed_lateness=lateness)
    check_segments(arrivals, cfg)
    full, near = Simulation(cfg), Simulation(cfg, local=True)
    for s in arrivals:
        full.arrive(s)
        near.arrive(s)
    assert [p.plan_id for p in near.merges] == [p.plan_id for p in full.merges]
    held = full.catalog.segments("t")
    assert sum(s.bytes for s in held) == sum(s.bytes for s in arrivals)
    late = of_table(held, cfg.for_table("t").rules)
    assert late is not None
    assert [run.due for run in late.runs if run.due] == [], "once quiet, no late run is due to fold"
    for run in late.runs:  # what waits: under the ceiling, sealed, and under the ratio
        assert len(run.late) < ceiling and run.sealed and run.late_bytes < ratio * run.base_bytes


def test_coverage_answers_with_the_late_segments_beside_their_host() -> None:
    week = Segment("W", "t", WEEK_1, loaded_at=MONDAY, origin=Origin.MERGE)
    straggler = late("L1", 2, 10, arrives=10)
    found = coverage([week, straggler], ())
    assert [a.segment_id for a in found.answering] == ["W", "L1"] and found.undefined_ranges == ()


def test_the_gauges_show_the_watermark_and_the_late_data_waiting() -> None:
    from prometheus_client import CollectorRegistry

    from compactor.observe.metrics.late_gauges import LateDataCollector

    sim = Simulation(config(late_fold_ratio=0.1))
    sealed_week(sim)
    sim.arrive(late("L1", 2, 200, arrives=10))
    rules = sim.config.for_table("t").rules
    registry = CollectorRegistry()
    registry.register(LateDataCollector(lambda: [("t", sim.catalog.segments("t"), rules)]))
    value = registry.get_sample_value
    assert value("compactor_watermark_seconds", {"table": "t"}) == (MONDAY + timedelta(days=8)).timestamp()
    assert (
        value("compactor_late_segments", {"table": "t"}),
        value("compactor_late_bytes", {"table": "t"}),
    ) == (1, 200)
    assert value("compactor_late_sealed_buckets", {"table": "t"}) == 1

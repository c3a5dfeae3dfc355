"""Planner invariants over random segment sets and random configs (hypothesis)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compactor.config.rules import (
    DEFAULT_POOLS,
    AutoMergeRule,
    BinPackRule,
    MajorRule,
    MinorRule,
    PoolConfig,
    RuleConfig,
)
from compactor.config.tables import ProjectConfig, TableFields, TableSettings
from compactor.domain.calendar import Level, bucket
from compactor.domain.plans import SkipReason, plan_id_for
from compactor.domain.segments import Origin, Segment, SegmentState, TimeRange
from compactor.rules.bin_packing import pack
from compactor.rules.engine import Evaluation, evaluate
from compactor.rules.pools import plan as bin_pack_plan
from compactor.rules.pools import pool_for
from compactor.rules.simulation import Simulation, check_segments
from tests.helpers.segments import seg

MB = 1024 * 1024
GB = 1024 * MB
BASE = datetime(2023, 12, 25, tzinfo=UTC)  # a Monday a week before a year end
UNITS = (timedelta(minutes=20), timedelta(hours=6), timedelta(days=1))
FILLABLE = (Level.HOUR, Level.DAY, Level.WEEK, Level.MONTH)  # with at most 40 segments of a unit
RULE_NAMES = ("auto_merge", "minor", "major", "bin_pack")

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- strategies -------------------------------------------------------------------------------


@st.composite
def timelines(draw: st.DrawFn, overlaps: bool = False, unit: timedelta | None = None) -> list[TimeRange]:
    """Time-ordered ranges on a grid: dense (back to back, mostly one unit wide) or sparse
    (gaps and wider ranges); overlaps only when asked."""
    unit = unit or draw(st.sampled_from(UNITS))
    dense = draw(st.booleans())
    n = draw(st.integers(6, 40) if dense else st.integers(1, 18))
    gaps = (0,) if dense else (0, 0, 0, 0, 0, 1, 3)
    widths = (1, 1, 1, 1, 2) if dense else (1, 1, 1, 2, 3, 7)
    cursor = BASE + unit * draw(st.integers(0, 30))
    ranges: list[TimeRange] = []
    for _ in range(n):
        cursor += unit * draw(st.sampled_from(gaps))
        width = unit * draw(st.sampled_from(widths))
        if overlaps and ranges and draw(st.integers(0, 5)) == 0:
            start = ranges[-1].start + unit * draw(st.integers(0, 2))
            ranges.append(TimeRange(start, start + width))
            continue
        ranges.append(TimeRange(cursor, cursor + width))
        cursor += width
    return ranges


SIZES_MB = (1, 10, 100, 300, 500, 700, 1000, 1500, 2500)


@st.composite
def segment_sets(
    draw: st.DrawFn,
    table: str = "t",
    overlaps: bool = False,
    online_only: bool = False,
    unit: timedelta | None = None,
) -> list[Segment]:
    ranges = draw(timelines(overlaps=overlaps, unit=unit))
    states = (SegmentState.ONLINE,) if online_only else (SegmentState.ONLINE,) * 6 + tuple(SegmentState)
    if draw(st.booleans()):  # uniform: nothing but the ranges, sizes and load times tells segments apart
        states, versions, subs, levels = (SegmentState.ONLINE,), (1,), (frozenset(),), (0,)
    else:
        versions, subs, levels = (
            (1, 1, 1, 2),
            (frozenset(), frozenset(), frozenset({"eu"})),
            (0, 0, 0, 0, 1, 2),
        )
    segments = []
    for i, r in enumerate(ranges):
        # distinct load times (the microseconds), in an order unrelated to the data's
        loaded_at = BASE + timedelta(minutes=draw(st.integers(0, 400 * 24 * 60)), microseconds=i)
        segments.append(
            Segment(
                id=f"s{i:02d}",
                table=table,
                range=r,
                loaded_at=loaded_at,
                records=draw(st.integers(0, 1000)),
                bytes=draw(st.sampled_from(SIZES_MB)) * MB + draw(st.integers(0, 999)),
                sub_partitions=draw(st.sampled_from(subs)),
                state=draw(st.sampled_from(states)),
                schema_version=draw(st.sampled_from(versions)),
                level=draw(st.sampled_from(levels)),
            )
        )
    return segments


@st.composite
def pool_sets(draw: st.DrawFn) -> tuple[PoolConfig, ...]:
    if draw(st.booleans()):
        return DEFAULT_POOLS
    pools = []
    for i in range(draw(st.integers(1, 3))):
        min_age = draw(st.sampled_from((timedelta(0), timedelta(minutes=30), timedelta(days=2))))
        span = draw(st.sampled_from((timedelta(hours=1), timedelta(days=10), timedelta(days=500))))
        pools.append(
            PoolConfig(
                name=f"p{i}",
                min_age=min_age,
                max_age=min_age + span,
                max_size=draw(st.sampled_from((100, 1024, 3000, 5000))) * MB,
                max_width=draw(
                    st.sampled_from((timedelta(hours=1), timedelta(hours=12), timedelta(days=30)))
                ),
            )
        )
    return tuple(pools)


@st.composite
def rule_configs(
    draw: st.DrawFn, names: Sequence[str] | None = None, levels: Sequence[Level] | None = None
) -> tuple[RuleConfig, ...]:
    if names is None:  # auto_merge cannot share a table with the rules that merge across gaps
        others = [n for n in RULE_NAMES if n != "auto_merge"]
        names = draw(
            st.one_of(
                st.just(["auto_merge"]),
                st.lists(st.sampled_from(others), min_size=1, max_size=3, unique=True),
            )
        )
    rules: list[RuleConfig] = []
    for name in names:
        if name == "auto_merge":
            # the levels a grid of 20 minutes, 6 hours or days can fill, more often than quarter and year
            likely = levels or (Level.HOUR, Level.DAY, Level.WEEK, Level.MONTH) * 3 + (
                Level.QUARTER,
                Level.YEAR,
            )
            chosen = draw(st.lists(st.sampled_from(likely), min_size=1, max_size=3, unique=True))
            rules.append(AutoMergeRule(rule="auto_merge", levels=tuple(chosen)))
        elif name == "minor":
            thresholds = (draw(st.sampled_from((0, 2, 3, 4))), draw(st.sampled_from((0, 2, 3))))
            rules.append(MinorRule(rule="minor", level_thresholds=thresholds))
        elif name == "major":
            threshold = draw(st.sampled_from((50, 512, 1024, 4096))) * MB
            rules.append(MajorRule(rule="major", size_threshold=threshold))
        else:
            strategy = draw(st.sampled_from(("first_fit", "best_fit")))
            rules.append(BinPackRule(rule="bin_pack", strategy=strategy, pools=draw(pool_sets())))
    return tuple(rules)


@st.composite
def table_settings(
    draw: st.DrawFn,
    names: Sequence[str] | None = None,
    filters: bool = True,
    levels: Sequence[Level] | None = None,
) -> TableSettings:
    rules = draw(rule_configs(names, levels))
    if not filters:
        return TableSettings(rules=rules)
    return TableSettings(
        merge_enabled=draw(st.sampled_from((True, True, True, True, False))),
        preserve_latest=draw(st.sampled_from((0, 0, 1, 3))),
        allowed_compaction_days=draw(st.sampled_from((0, 0, 30, 200))),
        lookback=draw(st.sampled_from((None, None, timedelta(days=3), timedelta(days=90)))),
        rules=rules,
    )


NOW_OFFSETS = (
    timedelta(0),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(days=3),
    timedelta(days=100),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Segment], TableSettings, datetime]:
    table = draw(table_settings())
    segments = draw(segment_sets(overlaps=not table.needs_disjoint_ranges))
    last_end = max(s.end for s in segments)
    now = last_end + draw(st.sampled_from(NOW_OFFSETS)) + timedelta(minutes=draw(st.integers(0, 59)))
    return segments, table, now


# --- checks -----------------------------------------------------------------------------------


def excluded_ids(segments: Sequence[Segment], table: TableSettings, now: datetime) -> dict[str, SkipReason]:
    """Segments no plan may touch, computed from the rules' semantics independently of the planners."""
    out: dict[str, SkipReason] = {}
    newest = sorted(segments, key=lambda s: s.loaded_at, reverse=True)[: table.preserve_latest]
    for s in segments:
        if not table.merge_enabled:
            out[s.id] = SkipReason.MERGE_DISABLED
        elif s.state is not SegmentState.ONLINE:
            out[s.id] = SkipReason.NOT_COMPLETED
        elif s in newest:
            out[s.id] = SkipReason.PRESERVED
        elif table.allowed_compaction_days and now - s.loaded_at > timedelta(
            days=table.allowed_compaction_days
        ):
            out[s.id] = SkipReason.TOO_OLD
        elif table.lookback is not None and now - s.end > table.lookback:
            out[s.id] = SkipReason.OUTSIDE_LOOKBACK
    return out


def check_evaluation(
    evaluation: Evaluation,
    segments: Sequence[Segment],
    table: TableSettings,
    now: datetime,
    only_rule: str | None = None,
) -> None:
    by_id = {s.id: s for s in segments}
    rules = {r.rule: r for r in table.rules if only_rule in (None, r.rule)}
    used: set[str] = set()
    for plan in evaluation.plans:
        assert plan.table == "t"
        assert len(plan.inputs) >= 2
        for s in plan.inputs:
            assert s.id not in used, f"{s.id} is in two plans"
            used.add(s.id)
            assert by_id[s.id] == s
        out = plan.output
        assert out.range == TimeRange(min(s.start for s in plan.inputs), max(s.end for s in plan.inputs))
        assert out.records == sum(s.records for s in plan.inputs)
        assert out.bytes == sum(s.bytes for s in plan.inputs)
        assert out.origin is Origin.MERGE
        assert out.state is SegmentState.ONLINE
        assert out.id not in by_id
        assert plan.plan_id == plan_id_for("t", plan.rule, plan.input_ids)
        rule = rules[plan.rule]
        if isinstance(rule, AutoMergeRule):
            assert plan.level is not None
            level = Level(plan.level)
            assert level in rule.levels
            home = bucket(level, plan.inputs[0].start)
            for prev, nxt in zip(plan.inputs, plan.inputs[1:], strict=False):
                assert nxt.start == prev.end, "auto_merge inputs must be contiguous"
            assert all(home.covers(s.range) for s in plan.inputs)
            # the run reaches its bucket's end, or a segment straddling that end starts where it stops
            straddled = any(s.start == out.end and s.end > home.end for s in segments)
            assert out.range == home or out.range.end == home.end or straddled
            assert len({(s.schema_version, s.sub_partitions) for s in plan.inputs}) == 1
        elif isinstance(rule, BinPackRule):
            pool = next(p for p in rule.pools if p.name == plan.pool)
            assert out.bytes <= pool.max_size
            assert out.range.duration <= pool.max_width
            assert all(pool_for(s, rule.pools, now) == pool for s in plan.inputs)
            assert len({(s.schema_version, s.sub_partitions) for s in plan.inputs}) == 1
        elif isinstance(rule, MajorRule):
            assert out.bytes < rule.size_threshold
        else:
            assert isinstance(rule, MinorRule)
            (level,) = {s.level for s in plan.inputs}
            assert level in (0, 1)
            assert len(plan.inputs) == rule.level_thresholds[level]
            assert out.level == level + 1
    for plan in evaluation.plans:
        event(f"plan by {plan.rule}")
    assert sum(p.rule == "auto_merge" for p in evaluation.plans) <= 1
    assert sum(p.rule == "major" for p in evaluation.plans) <= 1

    excluded = excluded_ids(segments, table, now)
    assert not used & set(excluded), {sid: excluded[sid] for sid in used & set(excluded)}
    # each excluded segment is explained by its filter, for every rule that ran
    for sid, reason in excluded.items():
        for rule_name in rules:
            assert any(
                d.segment_id == sid and d.rule == rule_name and d.reason is reason
                for d in evaluation.decisions
            )

    # chosen decisions are exactly the plan inputs
    in_plan = {sid: p.plan_id for p in evaluation.plans for sid in p.input_ids}
    chosen = {(d.segment_id, d.plan_id) for d in evaluation.decisions if d.chosen}
    assert chosen == set(in_plan.items())
    assert all(d.reason is None for d in evaluation.decisions if d.chosen)
    assert all(d.reason is not None for d in evaluation.decisions if not d.chosen)


# --- one evaluation -----------------------------------------------------------------------------


@FAST
@given(scenarios())
def test_evaluation_invariants(scenario: tuple[list[Segment], TableSettings, datetime]) -> None:
    segments, table, now = scenario
    evaluation = evaluate("t", segments, table, now)
    check_evaluation(evaluation, segments, table, now)
    quiet = evaluate("t", segments, table, now, explain=False)
    assert quiet.plans == evaluation.plans, "explain must not change the plans"
    assert set(quiet.decisions) <= set(evaluation.decisions)
    shuffled = evaluate("t", list(reversed(segments)), table, now)
    assert shuffled.plans == evaluation.plans, "input order must not matter"
    assert set(shuffled.decisions) == set(evaluation.decisions)


@FAST
@given(st.data())
def test_auto_merge_evaluation_invariants(data: st.DataObject) -> None:
    """auto_merge alone, over gap-free or gappy timelines: one merge at most, inside one bucket."""
    filters = data.draw(st.sampled_from((False, False, False, True)))
    levels = data.draw(st.sampled_from((FILLABLE, tuple(Level))))
    table = data.draw(table_settings(names=("auto_merge",), filters=filters, levels=levels))
    segments = data.draw(segment_sets(unit=grid_for(table.rules[0])))
    now = max(s.end for s in segments) + data.draw(st.sampled_from(NOW_OFFSETS))
    evaluation = evaluate("t", segments, table, now)
    check_evaluation(evaluation, segments, table, now)
    assert len(evaluation.plans) <= 1
    if evaluation.plans:
        (plan,) = evaluation.plans
        event(f"auto_merge merged a {plan.level}")
        # nothing at or above the threshold of the merged level is an input
        level = Level(plan.level or "")
        assert all(not home_covered(s, level) for s in plan.inputs)


def grid_for(rule: RuleConfig) -> timedelta:
    """A grid fine enough for the smallest selected level to fill its buckets with a few segments."""
    assert isinstance(rule, AutoMergeRule)
    smallest = min(rule.levels, key=lambda lv: lv.rank)
    return {Level.HOUR: UNITS[0], Level.DAY: UNITS[1]}.get(smallest, UNITS[2])


def home_covered(segment: Segment, level: Level) -> bool:
    home = bucket(level, segment.start)
    return segment.range == home or segment.end > home.end


@FAST
@given(scenarios(), st.sampled_from(RULE_NAMES))
def test_single_rule_evaluation_invariants(
    scenario: tuple[list[Segment], TableSettings, datetime], only: str
) -> None:
    segments, table, now = scenario
    evaluation = evaluate("t", segments, table, now, only_rule=only)
    assert {p.rule for p in evaluation.plans} <= {only}
    assert {d.rule for d in evaluation.decisions} <= {only}
    check_evaluation(evaluation, segments, table, now, only_rule=only)


@FAST
@given(segment_sets(online_only=True), pool_sets(), st.sampled_from(("first_fit", "best_fit")), st.booleans())
def test_bin_pack_plans_match_the_rule_stated_per_segment(
    segments: list[Segment], pools: tuple[PoolConfig, ...], strategy: str, explain: bool
) -> None:
    """The vectorised pools planner makes the plans a per-segment reading of Hydrolix's merge pools makes:
    each segment goes to `pool_for`'s pool; within a pool, one schema version and one set of
    sub-partitions, segments are packed in (start, id) order; groups come in the order of their
    first member; bins of two or more are merges."""
    rule = BinPackRule(rule="bin_pack", strategy=strategy, pools=pools)  # type: ignore[arg-type]
    now = max(s.end for s in segments) + timedelta(hours=1)
    groups: dict[tuple[str, int, frozenset[str]], list[Segment]] = {}
    for s in sorted(segments, key=lambda s: (s.start, s.id)):
        pool = pool_for(s, pools, now)
        if pool is not None:
            groups.setdefault((pool.name, s.schema_version, s.sub_partitions), []).append(s)
    expected = []
    for (name, _, _), members in groups.items():
        pool = next(p for p in pools if p.name == name)
        bins = pack(
            members,
            lambda s: s.bytes,
            pool.max_size,
            strategy,  # type: ignore[arg-type]
            span=lambda s: (s.range.start_ts, s.range.end_ts),
            max_span=pool.max_width.total_seconds(),
        )
        expected += [(name, plan_id_for("t", "bin_pack", (s.id for s in b))) for b in bins if len(b) > 1]
    outcome = bin_pack_plan(segments, rule, "t", now, explain)
    assert [(p.pool, p.plan_id) for p in outcome.plans] == expected


@FAST
@given(st.data())
def test_every_segment_is_explained_by_every_rule(data: st.DataObject) -> None:
    """Explainable decisions: each rule that runs says something about each segment."""
    table = data.draw(table_settings())
    segments = data.draw(segment_sets(overlaps=not table.needs_disjoint_ranges))
    now = max(s.end for s in segments) + data.draw(st.sampled_from(NOW_OFFSETS))
    evaluation = evaluate("t", segments, table, now)
    explained = {(d.segment_id, d.rule) for d in evaluation.decisions}
    for s in segments:
        for rule in table.rules:
            assert (s.id, rule.rule) in explained


def test_auto_merge_explains_segments_after_its_one_merge() -> None:
    """Segments left for the next attempt say so (regression: they used to get no decision)."""
    january = [seg(f"J{i:02d}", f"2022-01-{i:02d}") for i in range(1, 32)]
    february = [seg("F01", "2022-02-01"), seg("F02", "2022-02-02")]
    table = TableSettings(rules=(AutoMergeRule(rule="auto_merge", levels=(Level.WEEK, Level.MONTH)),))
    evaluation = evaluate("t", january + february, table, datetime(2030, 1, 1, tzinfo=UTC))
    (plan,) = evaluation.plans
    assert plan.level == "month"
    assert len(plan.inputs) == 31
    explained = {d.segment_id: d.reason for d in evaluation.decisions}
    assert explained["F01"] is SkipReason.INCOMPLETE_BUCKET  # February is not complete yet
    assert explained["F02"] is SkipReason.INCOMPLETE_BUCKET
    assert all(explained[s.id] is None for s in january)


def test_a_second_ready_run_waits_for_the_next_attempt() -> None:
    """Seed 000 Example 2: both halves of the year-end week are ready; one merges now."""
    days = [seg(n, f"2021-12-{d}") for n, d in zip("ABCDE", range(27, 32), strict=True)]
    days += [seg("F", "2022-01-01"), seg("G", "2022-01-02")]
    table = TableSettings(rules=(AutoMergeRule(rule="auto_merge", levels=(Level.WEEK,)),))
    evaluation = evaluate("t", days, table, datetime(2030, 1, 1, tzinfo=UTC))
    assert [p.input_ids for p in evaluation.plans] == [("A", "B", "C", "D", "E")]
    explained = {d.segment_id: d.reason for d in evaluation.decisions}
    assert explained["F"] is SkipReason.ONE_MERGE_PER_ATTEMPT
    assert explained["G"] is SkipReason.ONE_MERGE_PER_ATTEMPT


@FAST
@given(st.data())
def test_filtered_segments_never_merge_even_when_everything_else_would(data: st.DataObject) -> None:
    """Generous rules (everything fits), random filters: only filtered segments stay out."""
    table = data.draw(table_settings(names=("major",)))
    table = replace_rules(table, (MajorRule(rule="major", size_threshold=1 << 50),))
    segments = data.draw(segment_sets(overlaps=True))
    now = max(s.end for s in segments) + data.draw(st.sampled_from(NOW_OFFSETS))
    evaluation = evaluate("t", segments, table, now)
    check_evaluation(evaluation, segments, table, now)
    excluded = excluded_ids(segments, table, now)
    eligible = {s.id for s in segments} - set(excluded)
    merged = {sid for p in evaluation.plans for sid in p.input_ids}
    assert merged == (eligible if len(eligible) >= 2 else set())


def replace_rules(table: TableSettings, rules: tuple[RuleConfig, ...]) -> TableSettings:
    return TableSettings(
        merge_enabled=table.merge_enabled,
        preserve_latest=table.preserve_latest,
        allowed_compaction_days=table.allowed_compaction_days,
        lookback=table.lookback,
        rules=rules,
    )


# --- simulation -------------------------------------------------------------------------------


@st.composite
def arrivals(draw: st.DrawFn, table: str, disjoint: bool, unit: timedelta | None = None) -> list[Segment]:
    """Completed segments arriving in a random order (backfills included), load times increasing."""
    segments = draw(segment_sets(table=table, overlaps=not disjoint, online_only=True, unit=unit))
    order = draw(st.permutations(range(len(segments))))
    step = draw(
        st.sampled_from((timedelta(minutes=1), timedelta(minutes=7), timedelta(hours=1), timedelta(days=1)))
    )
    clock = max(s.end for s in segments) + draw(st.sampled_from((timedelta(0), timedelta(minutes=3))))
    out = []
    for k, i in enumerate(order):
        out.append(replace(segments[i], id=f"{table}{k:02d}", loaded_at=clock + step * k, level=0))
    return out


def union(ranges: Iterable[TimeRange]) -> list[tuple[datetime, datetime]]:
    merged: list[list[datetime]] = []
    for r in sorted(ranges):
        if merged and r.start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], r.end)
        else:
            merged.append([r.start, r.end])
    return [(a, b) for a, b in merged]


def covers(outer: list[tuple[datetime, datetime]], inner: list[tuple[datetime, datetime]]) -> bool:
    return all(any(a <= s and e <= b for a, b in outer) for s, e in inner)


def run(config: ProjectConfig, segments: Iterable[Segment]) -> Simulation:
    sim = Simulation(config)
    for s in segments:
        sim.arrive(s)
    return sim


@FAST
@given(st.data())
def test_simulation_terminates_and_conserves(data: st.DataObject) -> None:
    table = data.draw(table_settings(filters=data.draw(st.booleans())))
    segments = data.draw(arrivals("t", disjoint=table.needs_disjoint_ranges))
    config = ProjectConfig(defaults=table)
    sim = run(config, segments)  # raises RuntimeError if a cascade does not settle

    final = sim.catalog.segments("t")
    for rule in {p.rule for p in sim.merges}:
        event(f"merged by {rule}")
    assert sum(s.records for s in final) == sum(s.records for s in segments)
    assert sum(s.bytes for s in final) == sum(s.bytes for s in segments)
    assert len(final) == len(segments) - sum(len(p.inputs) - 1 for p in sim.merges)
    ids = Counter(s.id for s in final)
    assert max(ids.values()) == 1
    before, after = union(s.range for s in segments), union(s.range for s in final)
    assert covers(after, before)
    if {r.rule for r in table.rules} == {"auto_merge"}:
        assert after == before, "auto_merge must not change the covered time"
        check_segments(final, config)  # still disjoint
    # quiet at the end: one more attempt at the last arrival's time plans nothing
    assert evaluate("t", final, table, segments[-1].loaded_at).plans == ()


def test_auto_merge_cannot_share_a_table_with_rules_that_merge_across_gaps() -> None:
    # major would merge A [00:00, 00:20) and C [00:40, 01:00) across a missing B; B arriving
    # later would overlap the output, which an auto_merge table cannot hold
    with pytest.raises(ValueError, match="auto_merge needs disjoint, contiguous segments"):
        TableSettings(rules=(AutoMergeRule(rule="auto_merge", levels=(Level.DAY,)), MajorRule(rule="major")))


@FAST
@given(st.data())
def test_auto_merge_simulation_keeps_segments_within_buckets(data: st.DataObject) -> None:
    table = data.draw(table_settings(names=("auto_merge",), filters=False, levels=FILLABLE))
    (rule,) = table.rules
    assert isinstance(rule, AutoMergeRule)
    segments = data.draw(arrivals("t", disjoint=True, unit=grid_for(rule)))
    sim = run(ProjectConfig(defaults=table), segments)
    event(f"{min(len(sim.merges), 3)}+ merges")
    for plan in sim.merges:
        assert plan.level is not None
        home = bucket(Level(plan.level), plan.output.start)
        assert home.covers(plan.output.range)
        # the run reaches its bucket's end, or a segment straddling that end starts where it stops
        straddlers = [x for x in [*segments, *(m.output for m in sim.merges)] if x.start == plan.output.end]
        assert plan.output.end == home.end or any(x.end > home.end for x in straddlers)
        for prev, nxt in zip(plan.inputs, plan.inputs[1:], strict=False):
            assert nxt.start == prev.end


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(("auto_merge", "minor", "major")))
def test_attempts_near_the_triggering_segment_plan_what_full_attempts_plan(
    data: st.DataObject, name: str
) -> None:
    """Every arrival (and every merge output) triggers an attempt that looks only where it
    can complete a merge (time layers: the buckets it touches; minor: its level; major: the
    walk from the oldest candidate, and a full attempt after each of its merges); from a
    settled table, the merges are exactly the full attempts'. (Bin packing is tested at one
    instant below: as arrivals move the clock, segments age into other pools, which only a
    full evaluation finds.)"""
    table = data.draw(table_settings(names=(name,), filters=data.draw(st.booleans()), levels=FILLABLE))
    (rule,) = table.rules
    unit = grid_for(rule) if isinstance(rule, AutoMergeRule) else None
    segments = data.draw(arrivals("t", disjoint=isinstance(rule, AutoMergeRule), unit=unit))
    config = ProjectConfig(defaults=table)
    full, local = Simulation(config), Simulation(config, local=True)
    for s in segments:
        full.arrive(s)
        local.arrive(s)
        assert [p.plan_id for p in local.merges] == [p.plan_id for p in full.merges]
    event(f"{min(len(full.merges), 3)}+ merges")
    by_id = {s.id: s for s in full.catalog.segments("t")}
    assert {s.id: s for s in local.catalog.segments("t")} == by_id


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_on_a_settled_table_an_attempt_near_a_new_segment_plans_what_a_full_one_plans(
    scenario: tuple[list[Segment], TableSettings, datetime],
) -> None:
    """Any rules (time layers, bin packing and minor narrow their scan; the others do not),
    any filters: the table is settled at `now` by full attempts, then one segment arrives."""
    full, near = settled_then_one_more(*scenario)
    event(f"{min(len(full.plans), 2)}+ plans by {sorted(str(p.rule) for p in full.plans)}")
    assert near.plans == full.plans


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from((1, 2, 3)))
def test_a_new_load_frees_the_oldest_preserved_one_and_the_attempt_near_it_finds_that(
    scenario: tuple[list[Segment], TableSettings, datetime], preserve: int
) -> None:
    """The newest load pushes the oldest of the preserved ones out of `preserve_latest`:
    whatever that one can now merge with, the attempt near the new load finds it too."""
    segments, table, now = scenario
    *before, new = segments
    newest = max(s.loaded_at for s in segments) + timedelta(minutes=1)
    table = table.model_copy(update={"preserve_latest": preserve, "merge_enabled": True})
    full, near = settled_then_one_more([*before, replace(new, loaded_at=newest)], table, now)
    event(f"{min(len(full.plans), 2)}+ plans by {sorted(str(p.rule) for p in full.plans)}")
    assert near.plans == full.plans


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segment_sets(online_only=True),
    pool_sets(),
    st.sampled_from(("first_fit", "best_fit")),
    st.sampled_from((timedelta(minutes=5), timedelta(hours=1), timedelta(days=3))),
)
def test_bin_packing_near_a_new_segment_plans_what_a_full_packing_plans(
    segments: list[Segment], pools: tuple[PoolConfig, ...], strategy: str, age: timedelta
) -> None:
    rule = BinPackRule(rule="bin_pack", strategy=strategy, pools=pools)  # type: ignore[arg-type]
    full, near = settled_then_one_more(
        segments, TableSettings(rules=(rule,)), max(s.end for s in segments) + age
    )
    event(f"{min(len(full.plans), 2)}+ plans")
    assert near.plans == full.plans


def settled_then_one_more(
    segments: list[Segment], table: TableSettings, now: datetime
) -> tuple[Evaluation, Evaluation]:
    """All segments but the last, merged by full attempts at `now` until quiet; then the last
    arrives: a full attempt, and one near it."""
    *before, new = segments
    sim = Simulation(ProjectConfig(defaults=table))
    for s in before:
        sim.catalog.add(s)
    sim.cascade("t", now)
    sim.catalog.add(new)
    full = evaluate("t", sim.catalog.columns("t"), table, now, explain=False)
    return full, evaluate("t", sim.catalog.columns("t"), table, now, explain=False, near=(new,))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_interleaving_independent_tables_does_not_matter(data: st.DataObject) -> None:
    table_a = data.draw(table_settings(), label="a")
    table_b = data.draw(table_settings(), label="b")
    overrides = TableFields(**{name: getattr(table_b, name) for name in TableSettings.model_fields})
    config = ProjectConfig(defaults=table_a, tables={"b": overrides})
    assert config.for_table("b") == table_b
    seq_a = data.draw(arrivals("a", disjoint=table_a.needs_disjoint_ranges), label="arrivals a")
    seq_b = data.draw(arrivals("b", disjoint=table_b.needs_disjoint_ranges), label="arrivals b")
    picks = data.draw(st.lists(st.booleans(), min_size=len(seq_a) + len(seq_b)), label="interleaving")

    interleaved: list[Segment] = []
    ia = ib = 0
    for take_a in picks:
        if (take_a and ia < len(seq_a)) or ib == len(seq_b):
            if ia < len(seq_a):
                interleaved.append(seq_a[ia])
                ia += 1
        else:
            interleaved.append(seq_b[ib])
            ib += 1
    assert len(interleaved) == len(seq_a) + len(seq_b)

    mixed = run(config, interleaved)
    alone = run(config, seq_a + seq_b)
    for name in ("a", "b"):
        key = lambda s: s.id  # noqa: E731
        assert sorted(mixed.catalog.segments(name), key=key) == sorted(alone.catalog.segments(name), key=key)
        assert [p for p in mixed.merges if p.table == name] == [p for p in alone.merges if p.table == name]

"""Seed 002 (CarbonData): minor (level-threshold) and major (size-threshold) compaction,
and the filters every rule shares, exactly as CarbonData's documentation and docs/rules state."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from compactor.config.loading import load_config
from compactor.config.rules import MajorRule, MinorRule
from compactor.config.tables import ProjectConfig, TableSettings
from compactor.domain.plans import SkipReason
from compactor.domain.segments import Segment, SegmentState, TimeRange
from compactor.rules.engine import Evaluation, evaluate
from compactor.rules.simulation import Simulation

MB = 1024 * 1024
T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)


def load(i: int, *, start_day: int | None = None, table: str = "t", **kw: Any) -> Segment:
    """Load number `i` (1-based): one day of data, loaded one hour after the previous load."""
    begin = T0 + timedelta(days=(i if start_day is None else start_day) - 1)
    kw.setdefault("loaded_at", T0 + timedelta(days=60, hours=i))
    kw.setdefault("records", 10 * i)
    kw.setdefault("bytes", i * MB)
    return Segment(id=f"L{i:02d}", table=table, range=TimeRange(begin, begin + timedelta(days=1)), **kw)


def minor_sim(*thresholds: int) -> Simulation:
    config = load_config({"defaults": {"rules": [{"rule": "minor", "level_thresholds": list(thresholds)}]}})
    return Simulation(config)


def by_level(sim: Simulation, table: str = "t") -> dict[int, list[Segment]]:
    out: dict[int, list[Segment]] = {}
    for s in sorted(sim.catalog.segments(table), key=lambda s: (s.loaded_at, s.id)):
        out.setdefault(s.level, []).append(s)
    return out


def reasons(evaluation: Evaluation, rule: str | None = None) -> dict[str, SkipReason | None]:
    return {d.segment_id: d.reason for d in evaluation.decisions if rule is None or d.rule == rule}


# --- minor: level thresholds ------------------------------------------------------------------


def test_minor_seed_4_3_loads_one_at_a_time() -> None:
    sim = minor_sim(4, 3)
    merges_after: dict[int, int] = {}
    for i in range(1, 13):
        sim.arrive(load(i))
        merges_after[i] = len(sim.merges)
        if i < 4:
            assert sim.merges == []
    assert merges_after == {1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1, 8: 2, 9: 2, 10: 2, 11: 2, 12: 4}

    first, second, third, top = sim.merges
    for n, plan in enumerate((first, second, third)):
        assert plan.rule == "minor"
        assert plan.level == "level-1"
        assert plan.output.level == 1
        assert plan.input_ids == tuple(f"L{i:02d}" for i in range(4 * n + 1, 4 * n + 5))
    # the third level-1 merge and the level-2 merge happen in the same cascade (after load 12)
    assert top.level == "level-2"
    assert top.output.level == 2
    assert top.input_ids == (first.output.id, second.output.id, third.output.id)
    assert sim.catalog.segments("t") == [top.output]
    assert top.output.records == sum(10 * i for i in range(1, 13))
    assert top.output.bytes == sum(i * MB for i in range(1, 13)) == 78 * MB
    assert top.output.range == TimeRange(T0, T0 + timedelta(days=12))


def test_minor_intermediate_layouts() -> None:
    sim = minor_sim(4, 3)
    for i in range(1, 5):
        sim.arrive(load(i))
    layout = by_level(sim)
    assert list(layout) == [1]
    assert [s.origin for s in layout[1]] == ["merge"]
    for i in range(5, 9):
        sim.arrive(load(i))
    layout = by_level(sim)
    assert list(layout) == [1]
    assert len(layout[1]) == 2
    sim.arrive(load(9))
    layout = by_level(sim)
    assert (len(layout[0]), len(layout[1])) == (1, 2)


def test_minor_level_2_is_never_merged_again() -> None:
    sim = minor_sim(4, 3)
    for i in range(1, 13):
        sim.arrive(load(i))
    (first_level2,) = sim.catalog.segments("t")
    assert first_level2.level == 2
    for i in range(13, 25):
        sim.arrive(load(i))
    layout = by_level(sim)
    assert list(layout) == [2]
    assert len(layout[2]) == 2
    assert layout[2][0] == first_level2  # untouched
    second_level2 = layout[2][1]
    assert second_level2.range == TimeRange(T0 + timedelta(days=12), T0 + timedelta(days=24))
    assert len(sim.merges) == 8
    assert all(first_level2.id not in p.input_ids for p in sim.merges)

    evaluation = evaluate("t", sim.catalog.segments("t"), sim.config.for_table("t"), NOW)
    assert evaluation.plans == ()
    assert reasons(evaluation) == {
        first_level2.id: SkipReason.FINAL_LEVEL,
        second_level2.id: SkipReason.FINAL_LEVEL,
    }


def test_minor_groups_by_load_order_not_time_order() -> None:
    sim = minor_sim(4, 3)
    # data days 5, 1, 3, 2 loaded first; the 4th load is day 4's
    order = [5, 1, 3, 2, 4, 6]
    for n, day in enumerate(order, start=1):
        sim.arrive(load(n, start_day=day))
    (plan,) = sim.merges
    assert set(plan.input_ids) == {"L01", "L02", "L03", "L04"}
    assert plan.output.range == TimeRange(T0, T0 + timedelta(days=5))


def test_minor_below_count_reason() -> None:
    settings = TableSettings(rules=(MinorRule(rule="minor", level_thresholds=(4, 3)),))
    segments = [load(i) for i in range(1, 4)]
    evaluation = evaluate("t", segments, settings, NOW)
    assert evaluation.plans == ()
    assert set(reasons(evaluation).values()) == {SkipReason.BELOW_LEVEL_COUNT}


def test_minor_several_groups_in_one_attempt() -> None:
    """9 loads seen at once with [4, 3]: two level-1 merges; the 9th waits."""
    settings = TableSettings(rules=(MinorRule(rule="minor", level_thresholds=(4, 3)),))
    evaluation = evaluate("t", [load(i) for i in range(1, 10)], settings, NOW)
    assert [p.input_ids for p in evaluation.plans] == [
        ("L01", "L02", "L03", "L04"),
        ("L05", "L06", "L07", "L08"),
    ]
    assert reasons(evaluation)["L09"] is SkipReason.BELOW_LEVEL_COUNT


def test_minor_zero_disables_level_1() -> None:
    sim = minor_sim(0, 3)
    for i in range(1, 13):
        sim.arrive(load(i))
    assert sim.merges == []
    evaluation = evaluate("t", sim.catalog.segments("t"), sim.config.for_table("t"), NOW)
    assert set(reasons(evaluation).values()) == {SkipReason.BELOW_LEVEL_COUNT}
    assert all("disabled" in d.detail for d in evaluation.decisions)


def test_minor_zero_disables_level_2() -> None:
    sim = minor_sim(4, 0)
    for i in range(1, 17):
        sim.arrive(load(i))
    layout = by_level(sim)
    assert list(layout) == [1]
    assert len(layout[1]) == 4
    assert len(sim.merges) == 4
    evaluation = evaluate("t", sim.catalog.segments("t"), sim.config.for_table("t"), NOW)
    assert evaluation.plans == ()
    assert set(reasons(evaluation).values()) == {SkipReason.BELOW_LEVEL_COUNT}


def test_minor_other_thresholds_2_3() -> None:
    """The seed's parameter example: 2,3 -> every two loads a level-1; three of those a level-2."""
    sim = minor_sim(2, 3)
    for i in range(1, 7):
        sim.arrive(load(i))
    assert [p.level for p in sim.merges] == ["level-1", "level-1", "level-1", "level-2"]
    (only,) = sim.catalog.segments("t")
    assert only.level == 2


# --- major: size threshold --------------------------------------------------------------------


def major_segments(sizes_mb: Sequence[int]) -> list[Segment]:
    return [
        load(i, bytes=size * MB, loaded_at=T0 + timedelta(days=60, hours=i))
        for i, size in enumerate(sizes_mb, start=1)
    ]


def major_settings(threshold: str = "1024MB", **kw: Any) -> TableSettings:
    config = load_config({"defaults": {"rules": [{"rule": "major", "size_threshold": threshold}], **kw}})
    return config.defaults


def test_major_seed_example() -> None:
    settings = major_settings("1024MB")
    rule = settings.rules[0]
    assert isinstance(rule, MajorRule)
    assert rule.size_threshold == 1024 * MB
    segments = major_segments([300, 400, 500, 200, 100])
    evaluation = evaluate("t", segments, settings, NOW)
    (plan,) = evaluation.plans
    assert plan.rule == "major"
    assert plan.input_ids == ("L01", "L02", "L04", "L05")
    assert plan.output.bytes == 1000 * MB
    why = reasons(evaluation)
    assert why["L03"] is SkipReason.ABOVE_SIZE_THRESHOLD
    assert {sid for sid, reason in why.items() if reason is None} == {"L01", "L02", "L04", "L05"}
    assert all(d.plan_id == plan.plan_id for d in evaluation.decisions if d.chosen)


def test_major_walks_in_load_order_not_time_order() -> None:
    """Loaded 300, 400, 500, 200, 100 but with data days reversed: the same four merge."""
    sizes = [300, 400, 500, 200, 100]
    segments = [
        load(i, start_day=10 - i, bytes=size * MB, loaded_at=T0 + timedelta(days=60, hours=i))
        for i, size in enumerate(sizes, start=1)
    ]
    evaluation = evaluate("t", segments, major_settings(), NOW)
    (plan,) = evaluation.plans
    assert set(plan.input_ids) == {"L01", "L02", "L04", "L05"}
    assert reasons(evaluation)["L03"] is SkipReason.ABOVE_SIZE_THRESHOLD


def test_major_reaching_the_threshold_exactly_is_skipped() -> None:
    evaluation = evaluate("t", major_segments([600, 424]), major_settings("1024MB"), NOW)
    assert evaluation.plans == ()
    why = reasons(evaluation)
    assert why == {"L01": SkipReason.NOTHING_TO_MERGE_WITH, "L02": SkipReason.ABOVE_SIZE_THRESHOLD}


def test_major_just_below_the_threshold_merges() -> None:
    segments = major_segments([600, 424])
    segments[1] = load(2, bytes=424 * MB - 1, loaded_at=segments[1].loaded_at)
    (plan,) = evaluate("t", segments, major_settings("1024MB"), NOW).plans
    assert plan.output.bytes == 1024 * MB - 1


def test_major_single_segment_over_threshold_and_nothing_else() -> None:
    evaluation = evaluate("t", major_segments([2000, 100]), major_settings(), NOW)
    assert evaluation.plans == ()
    assert reasons(evaluation) == {
        "L01": SkipReason.ABOVE_SIZE_THRESHOLD,
        "L02": SkipReason.NOTHING_TO_MERGE_WITH,
    }


def test_major_with_manual_trigger_runs_only_when_asked() -> None:
    config = load_config(
        {"defaults": {"rules": [{"rule": "major", "size_threshold": "1024MB", "trigger": "manual"}]}}
    )
    settings = config.defaults
    segments = major_segments([300, 400, 500, 200, 100])
    assert evaluate("t", segments, settings, NOW).plans == ()
    (by_trigger,) = evaluate("t", segments, settings, NOW, trigger="manual").plans
    (by_name,) = evaluate("t", segments, settings, NOW, only_rule="major").plans
    assert by_trigger == by_name
    assert by_name.input_ids == ("L01", "L02", "L04", "L05")


def test_major_in_simulation_leaves_500_alone() -> None:
    sim = Simulation(ProjectConfig(defaults=major_settings(), tables={}))
    for s in major_segments([300, 400, 500, 200, 100]):
        sim.catalog.add(s)
    sim.attempt("t", NOW, only_rule="major")
    sizes = sorted(s.bytes // MB for s in sim.catalog.segments("t"))
    assert sizes == [500, 1000]


# --- filters shared by the rules --------------------------------------------------------------

RULES = [
    pytest.param({"rule": "major", "size_threshold": "100GB"}, id="major"),
    pytest.param({"rule": "minor", "level_thresholds": [2, 0]}, id="minor"),
]


def settings_with(rule: dict[str, Any], **kw: Any) -> TableSettings:
    return load_config({"defaults": {"rules": [rule], **kw}}).defaults


def merged_ids(evaluation: Evaluation) -> set[str]:
    return {sid for p in evaluation.plans for sid in p.input_ids}


@pytest.mark.parametrize("rule", RULES)
def test_preserve_latest_keeps_the_newest_loads(rule: dict[str, Any]) -> None:
    # load order differs from time order: L06 and L05 hold the oldest data but were loaded last
    segments = [load(i, start_day=10 - i) for i in range(1, 7)]
    evaluation = evaluate("t", segments, settings_with(rule, preserve_latest=2), NOW)
    assert merged_ids(evaluation) == {"L01", "L02", "L03", "L04"}
    why = reasons(evaluation)
    assert why["L05"] is SkipReason.PRESERVED
    assert why["L06"] is SkipReason.PRESERVED


def test_preserve_latest_through_the_simulation() -> None:
    config = load_config(
        {"defaults": {"preserve_latest": 2, "rules": [{"rule": "minor", "level_thresholds": [4, 3]}]}}
    )
    sim = Simulation(config)
    for i in range(1, 6):
        sim.arrive(load(i))
        assert sim.merges == [], f"merged after load {i}"
    sim.arrive(load(6))
    (plan,) = sim.merges
    assert plan.input_ids == ("L01", "L02", "L03", "L04")
    assert {s.id for s in sim.catalog.segments("t")} == {plan.output.id, "L05", "L06"}


@pytest.mark.parametrize("rule", RULES)
def test_allowed_compaction_days(rule: dict[str, Any]) -> None:
    days = 2
    segments = [
        load(1, loaded_at=NOW - timedelta(days=3)),
        load(2, loaded_at=NOW - timedelta(days=2, seconds=1)),
        load(3, loaded_at=NOW - timedelta(days=2)),  # exactly N days: still within the window
        load(4, loaded_at=NOW - timedelta(hours=1)),
    ]
    evaluation = evaluate("t", segments, settings_with(rule, allowed_compaction_days=days), NOW)
    assert merged_ids(evaluation) == {"L03", "L04"}
    why = reasons(evaluation)
    assert why["L01"] is SkipReason.TOO_OLD
    assert why["L02"] is SkipReason.TOO_OLD


@pytest.mark.parametrize("rule", RULES)
def test_allowed_compaction_days_zero_is_off(rule: dict[str, Any]) -> None:
    segments = [load(1, loaded_at=NOW - timedelta(days=3000)), load(2, loaded_at=NOW - timedelta(days=2000))]
    evaluation = evaluate("t", segments, settings_with(rule, allowed_compaction_days=0), NOW)
    assert merged_ids(evaluation) == {"L01", "L02"}


@pytest.mark.parametrize("rule", RULES)
def test_lookback(rule: dict[str, Any]) -> None:
    def ending(i: int, end: datetime) -> Segment:
        return Segment(
            id=f"L{i:02d}",
            table="t",
            range=TimeRange(end - timedelta(days=1), end),
            loaded_at=NOW - timedelta(hours=10 - i),
        )

    segments = [
        ending(1, NOW - timedelta(days=31)),
        ending(2, NOW - timedelta(days=30, seconds=1)),
        ending(3, NOW - timedelta(days=30)),  # ended exactly 30 days ago: inside
        ending(4, NOW - timedelta(days=1)),
    ]
    evaluation = evaluate("t", segments, settings_with(rule, lookback="30d"), NOW)
    assert merged_ids(evaluation) == {"L03", "L04"}
    why = reasons(evaluation)
    assert why["L01"] is SkipReason.OUTSIDE_LOOKBACK
    assert why["L02"] is SkipReason.OUTSIDE_LOOKBACK


@pytest.mark.parametrize("rule", RULES)
def test_merge_disabled(rule: dict[str, Any]) -> None:
    segments = [load(i) for i in range(1, 5)]
    evaluation = evaluate("t", segments, settings_with(rule, merge_enabled=False), NOW)
    assert evaluation.plans == ()
    assert reasons(evaluation) == dict.fromkeys(("L01", "L02", "L03", "L04"), SkipReason.MERGE_DISABLED)


def test_merge_disabled_in_simulation_for_one_table_only() -> None:
    config = load_config(
        {
            "defaults": {"rules": [{"rule": "minor", "level_thresholds": [4, 3]}]},
            "tables": {"frozen": {"merge_enabled": False}},
        }
    )
    sim = Simulation(config)
    for i in range(1, 5):
        sim.arrive(load(i, table="frozen"))
        sim.arrive(load(i, table="live"))
    assert {p.table for p in sim.merges} == {"live"}
    assert len(sim.catalog.segments("frozen")) == 4


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("state", [SegmentState.LOADING, SegmentState.REFRESHING])
def test_segments_not_online_are_not_considered(rule: dict[str, Any], state: SegmentState) -> None:
    segments = [load(1), load(2, state=state), load(3), load(4, state=state), load(5)]
    evaluation = evaluate("t", segments, settings_with(rule), NOW)
    merged = merged_ids(evaluation)
    assert not merged & {"L02", "L04"}
    assert merged  # the completed ones still merge
    why = reasons(evaluation)
    assert why["L02"] is SkipReason.NOT_COMPLETED
    assert why["L04"] is SkipReason.NOT_COMPLETED


def test_minor_counts_only_completed_segments() -> None:
    settings = settings_with({"rule": "minor", "level_thresholds": [4, 3]})
    segments = [load(1), load(2), load(3, state=SegmentState.LOADING), load(4)]
    assert evaluate("t", segments, settings, NOW).plans == ()
    (plan,) = evaluate("t", [*segments, load(5)], settings, NOW).plans
    assert plan.input_ids == ("L01", "L02", "L04", "L05")


def test_filters_apply_in_a_fixed_order_one_reason_each() -> None:
    """A segment failing several filters gets one decision per rule."""
    settings = settings_with(
        {"rule": "major", "size_threshold": "100GB"},
        preserve_latest=1,
        allowed_compaction_days=1,
        lookback="1d",
    )
    old = load(1, loaded_at=NOW - timedelta(days=5), state=SegmentState.LOADING)
    evaluation = evaluate("t", [old, load(2, loaded_at=NOW)], settings, NOW)
    decisions = [d for d in evaluation.decisions if d.segment_id == "L01"]
    assert [d.reason for d in decisions] == [SkipReason.NOT_COMPLETED]


def test_minor_waits_to_group_a_level_while_a_running_merge_still_makes_segments_of_it() -> None:
    """Merges run side by side commit out of load order: level 1 pairs its segments only once
    every running level-0 merge is in, so it pairs neighbours (L01-02 with L03-04, not L05-06)."""
    config = load_config({"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 2]}]}})
    table_settings = config.for_table("t")
    loads = [load(i) for i in range(1, 7)]
    first, second, third = evaluate("t", loads, table_settings, NOW).plans
    done = [first.output, third.output]  # the first and third committed; the second still runs
    running = dict.fromkeys(second.input_ids, second.plan_id)
    evaluation = evaluate("t", [*done, *second.inputs], table_settings, NOW, running=running)
    assert evaluation.plans == () and [p.input_ids for p in evaluation.ready] == [
        (first.output.id, third.output.id)
    ], "the pair waits (as debt)"
    waits = [d for d in evaluation.decisions if d.reason is SkipReason.LEVEL_IN_FLIGHT]
    assert {d.segment_id for d in waits} == {first.output.id, third.output.id}
    assert second.plan_id in waits[0].detail and "level 1" in waits[0].detail

    both = [first.output, second.output, third.output]
    (pair,) = evaluate("t", both, table_settings, NOW).plans
    assert pair.input_ids == (first.output.id, second.output.id), "neighbours, in load order"
    level_two_running = dict.fromkeys(pair.input_ids, pair.plan_id)
    new = [load(i) for i in (7, 8)]
    (level_zero,) = evaluate("t", [*both, *new], table_settings, NOW, running=level_two_running).plans
    assert level_zero.input_ids == ("L07", "L08"), "a merge making level 2 keeps no level-0 pair waiting"

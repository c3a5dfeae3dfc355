"""Kylin's multi-level partitions: merges only combine settled segments with identical sub-partition
sets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import combinations

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from compactor.config.loading import load_config
from compactor.config.rules import AutoMergeRule
from compactor.config.tables import TableSettings
from compactor.delta.predicates import sub_partition_literal
from compactor.domain.calendar import Level
from compactor.domain.plans import SkipReason
from compactor.domain.segments import Segment, SegmentState, TimeRange
from compactor.errors import ConfigError, InvalidSegmentError, ManualMergeError
from compactor.rules import manual
from compactor.rules.engine import evaluate
from compactor.rules.simulation import Simulation
from tests.helpers.segments import seg

NOW = datetime(2030, 1, 1, tzinfo=UTC)
WEEK = TableSettings(rules=(AutoMergeRule(rule="auto_merge", levels=(Level.WEEK,)),))
EU, EU_US = frozenset({"eu"}), frozenset({"eu", "us"})


def week_of(sets: list[frozenset[str]], **kw: object) -> list:  # type: ignore[type-arg]
    return [seg(f"d{i + 1}", f"2024-01-0{i + 1}", sub_partitions=sets[i], **kw) for i in range(7)]  # type: ignore[arg-type]


def test_identical_sets_merge_and_the_output_keeps_the_set() -> None:
    (plan,) = evaluate("t", week_of([EU_US] * 7), WEEK, NOW).plans
    assert plan.output.sub_partitions == EU_US
    assert len(plan.inputs) == 7


def test_differing_sets_do_not_merge_and_say_why() -> None:
    evaluation = evaluate("t", week_of([EU_US] * 6 + [EU]), WEEK, NOW)
    assert evaluation.plans == ()
    reasons = {d.segment_id: d for d in evaluation.decisions}
    assert reasons["d1"].reason is SkipReason.SUB_PARTITIONS_DIFFER
    assert "d7 holds sub-partitions ['eu']" in reasons["d1"].detail
    assert reasons["d7"].reason is SkipReason.SUB_PARTITIONS_DIFFER


@pytest.mark.parametrize("state", [SegmentState.LOADING, SegmentState.REFRESHING])
def test_a_segment_with_an_unsettled_sub_partition_waits(state: SegmentState) -> None:
    segments = week_of([EU_US] * 7)
    segments[3] = seg("d4", "2024-01-04", sub_partitions=EU_US, sub_partition_states=(("us", state),))
    evaluation = evaluate("t", segments, WEEK, NOW)
    assert evaluation.plans == ()
    assert any(
        d.segment_id == "d4" and d.reason is SkipReason.NOT_COMPLETED and str(state) in d.detail
        for d in evaluation.decisions
    )
    with pytest.raises(ManualMergeError, match=f"d4 \\(sub-partition us {state}\\)"):
        manual.plan("t", ["d3", "d4"], segments, WEEK)


def test_adding_the_missing_sub_partition_lets_the_week_merge() -> None:
    sim = Simulation(load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}))
    for s in week_of([EU_US] * 6 + [EU]):
        sim.arrive(s)
    assert sim.merges == []
    sim.catalog.update(seg("d7", "2024-01-07", sub_partitions=EU_US))
    sim.cascade("t", NOW)
    assert [len(p.inputs) for p in sim.merges] == [7]


def test_manual_merge_names_segments_and_differing_values() -> None:
    segments = week_of([EU_US, EU] + [EU_US] * 5)
    with pytest.raises(ManualMergeError) as err:
        manual.plan("t", ["d1", "d2"], segments, WEEK)
    assert "us not in every segment" in str(err.value)
    assert "d1=['eu', 'us']" in str(err.value) and "d2=['eu']" in str(err.value)


def test_states_must_name_built_values() -> None:
    with pytest.raises(InvalidSegmentError, match="lacks"):
        seg("x", "2024-01-01", sub_partitions=EU, sub_partition_states=(("us", SegmentState.LOADING),))


def test_config_declares_values_with_types_and_a_limit() -> None:
    config = load_config({"tables": {"t": {"sub_partition": {"column": "region", "values": ["eu", "EU"]}}}})
    sub = config.for_table("t").sub_partition
    assert sub is not None and sub.values == ("eu", "EU")  # case-sensitive: two values
    assert sub_partition_literal(sub, "o'neil") == "CAST('o''neil' AS string)"
    typed = load_config(
        {"tables": {"t": {"sub_partition": {"column": "day", "type": "date", "values": ["2024-01-01"]}}}}
    )
    day = typed.for_table("t").sub_partition
    assert day is not None and sub_partition_literal(day, "2024-01-01") == "CAST('2024-01-01' AS date)"
    with pytest.raises(ConfigError, match="2001 sub-partition values declared; at most 2000"):
        load_config(
            {"tables": {"t": {"sub_partition": {"column": "c", "values": [str(i) for i in range(2001)]}}}}
        )
    with pytest.raises(ConfigError, match="'300' is not a valid tinyint"):
        load_config(
            {"tables": {"t": {"sub_partition": {"column": "c", "type": "tinyint", "values": ["300"]}}}}
        )
    with pytest.raises(ConfigError, match="declared twice"):
        load_config({"tables": {"t": {"sub_partition": {"column": "c", "values": ["a", "a"]}}}})


SETS = [frozenset(c) for n in range(4) for c in combinations(["eu", "us", "apac"], n)]
UNSETTLED = st.sampled_from([SegmentState.LOADING, SegmentState.REFRESHING])
DAYS = {Level.WEEK: 7, Level.MONTH: 31}  # January 2024 starts on a Monday


@st.composite
def layers(draw: st.DrawFn) -> tuple[Level, list[Segment]]:
    """A whole week or month of daily loads: most hold one set of values; a few may hold another,
    or have one of their values still loading or refreshing."""
    level = draw(st.sampled_from([Level.WEEK, Level.MONTH]))
    common = draw(st.sampled_from(SETS))
    days = range(DAYS[level])
    odd = draw(st.sets(st.sampled_from(days), max_size=3))
    unsettled = draw(st.dictionaries(st.sampled_from(days), UNSETTLED, max_size=2))
    segments = []
    for i in days:
        values = draw(st.sampled_from([v for v in SETS if v != common])) if i in odd else common
        states = ((min(values), unsettled[i]),) if i in unsettled and values else ()
        segments.append(
            seg(f"d{i}", f"2024-01-{i + 1:02d}", sub_partitions=values, sub_partition_states=states)
        )
    return level, segments


@settings(max_examples=150, deadline=None)
@example((Level.WEEK, week_of([EU_US] * 7)))
@example((Level.MONTH, [seg(f"d{i}", f"2024-01-{i + 1:02d}", sub_partitions=EU) for i in range(31)]))
@given(layers())
def test_the_layer_merges_exactly_when_every_segment_is_settled_with_one_set(
    layer: tuple[Level, list[Segment]],
) -> None:
    level, segments = layer
    config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": [str(level)]}]}})
    sim = Simulation(config)
    for s in segments:
        sim.arrive(s)
    mergeable = all(s.settled for s in segments) and len({s.sub_partitions for s in segments}) == 1
    event(f"{level}: {'merges' if mergeable else 'waits'}")
    assert [sorted(p.input_ids) for p in sim.merges] == (
        [sorted(s.id for s in segments)] if mergeable else []
    )
    for plan in sim.merges:
        assert plan.output.sub_partitions == segments[0].sub_partitions


AB, AC = frozenset({"A", "B"}), frozenset({"A", "C"})


def test_differing_indexes_do_not_merge_and_say_why() -> None:
    segments = [
        *week_of([EU_US] * 7, indexes=AB)[:6],
        seg("d7", "2024-01-07", sub_partitions=EU_US, indexes=AC),
    ]
    evaluation = evaluate("t", segments, WEEK, NOW)
    assert evaluation.plans == ()
    reasons = {d.segment_id: d for d in evaluation.decisions}
    assert reasons["d1"].reason is SkipReason.INDEXES_DIFFER
    assert "d7 built indexes ['A', 'C'], this run ['A', 'B']" in reasons["d1"].detail


def test_identical_indexes_merge_and_the_output_keeps_them() -> None:
    (plan,) = evaluate("t", week_of([EU_US] * 7, indexes=AB), WEEK, NOW).plans
    assert plan.output.indexes == AB and plan.output.sub_partitions == EU_US


def test_bin_pack_groups_by_indexes() -> None:
    config = load_config({"defaults": {"rules": [{"rule": "bin_pack"}]}})
    start = datetime(2024, 1, 1, tzinfo=UTC)
    tens = [
        Segment(f"m{i}", "t", TimeRange(start, start + timedelta(minutes=10)), loaded_at=start, bytes=10,
                indexes=AB if i < 3 else AC)
        for i in range(6)
    ]  # fmt: skip
    plans = evaluate("t", tens, config.for_table("t"), start + timedelta(hours=2)).plans
    assert sorted(sorted(p.input_ids) for p in plans) == [["m0", "m1", "m2"], ["m3", "m4", "m5"]]
    assert {p.output.indexes for p in plans} == {AB, AC}


@pytest.mark.parametrize(
    ("segments", "condition"),
    [
        (
            [seg("a", "2024-01-01", indexes=AB), seg("b", "2024-01-02", indexes=AC)],
            "inconsistent indexes (B, C not in every segment): a=['A', 'B']; b=['A', 'C']",
        ),
        (
            [seg("a", "2024-01-01", sub_partitions=EU_US), seg("b", "2024-01-02", sub_partitions=EU)],
            "inconsistent sub-partition values (us not in every segment): a=['eu', 'us']; b=['eu']",
        ),
        (
            [seg("a", "2024-01-01"), seg("b", "2024-01-03")],
            "time ranges are not continuous",
        ),
    ],
)
def test_manual_merge_names_the_failed_kylin_condition(segments: list, condition: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ManualMergeError) as err:
        manual.plan("t", ["a", "b"], segments, WEEK)
    assert condition in str(err.value)


def test_turning_multi_level_partitioning_off_takes_a_table_holding_values_offline() -> None:
    off = load_config(
        {
            "tables": {
                "t": {
                    "rules": [{"rule": "auto_merge", "levels": ["week"]}],
                    "sub_partition": {"column": "region", "values": ["eu", "us"], "enabled": False},
                }
            }
        }
    ).for_table("t")
    evaluation = evaluate("t", week_of([EU_US] * 7), off, NOW)
    assert evaluation.plans == ()
    assert {d.reason for d in evaluation.decisions} == {SkipReason.SUB_PARTITIONING_OFF}
    assert "7 segment(s) hold region values" in evaluation.decisions[0].detail
    assert "compactor subpartitions delete" in evaluation.decisions[0].detail
    # once the values are deleted (segments without any), the table merges again
    (plan,) = evaluate("t", week_of([frozenset()] * 7), off, NOW).plans
    assert len(plan.inputs) == 7
    # turned back on, the segments holding values merge as before
    on = off.model_copy(update={"sub_partition": off.sub_partition.model_copy(update={"enabled": True})})  # type: ignore[union-attr]
    assert len(evaluate("t", week_of([EU_US] * 7), on, NOW).plans) == 1

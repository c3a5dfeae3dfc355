"""Custom (manual) merge of named segments (seeds 000 and 002): validated, all or nothing."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from pydantic import ValidationError

from compactor.config.loading import load_config
from compactor.config.rules import AutoMergeRule, BinPackRule, MajorRule, MinorRule
from compactor.config.tables import TableSettings
from compactor.domain.segments import Segment, SegmentState, TimeRange
from compactor.errors import CompactorError, ManualMergeError
from compactor.rules import manual
from compactor.rules.simulation import Simulation
from tests.helpers.segments import day, seg

AUTO = TableSettings()  # auto_merge: needs disjoint, continuous ranges
BIN_PACK_ONLY = TableSettings(rules=(BinPackRule(rule="bin_pack"),))
CARBON = TableSettings(rules=(MinorRule(rule="minor"), MajorRule(rule="major")))


def week() -> list[Segment]:
    """Seven daily segments D1..D7 covering 2024-01-01 .. 2024-01-07, with records and sizes."""
    return [
        seg(f"D{i}", f"2024-01-0{i}", records=100 * i, bytes=1000 * i, sub_partitions=frozenset({"eu", "us"}))
        for i in range(1, 8)
    ]


def error_of(ids: list[str], segments: list[Segment], settings: TableSettings = AUTO) -> str:
    with pytest.raises(ManualMergeError) as info:
        manual.plan("t", ids, segments, settings)
    assert isinstance(info.value, CompactorError)
    return str(info.value)


def test_valid_merge() -> None:
    segments = week()
    plan = manual.plan("t", ["D3", "D2", "D4"], segments, AUTO)
    assert plan.rule == "manual"
    assert plan.table == "t"
    assert plan.input_ids == ("D2", "D3", "D4")  # ordered by time
    assert plan.output.range == TimeRange(day("2024-01-02"), day("2024-01-05"))
    assert plan.output.records == 200 + 300 + 400
    assert plan.output.bytes == 2000 + 3000 + 4000
    assert plan.output.sub_partitions == frozenset({"eu", "us"})
    assert plan.output.loaded_at == day("2024-01-05")
    assert plan == manual.plan("t", ["D2", "D3", "D4"], segments, AUTO)  # deterministic id


def test_valid_merge_of_two() -> None:
    plan = manual.plan("t", ["D6", "D7"], week(), CARBON)
    assert plan.input_ids == ("D6", "D7")


def test_unknown_id() -> None:
    message = error_of(["D1", "D9", "X"], week())
    assert "no such segment" in message
    assert "D9" in message
    assert "X" in message
    assert "D1" not in message


def test_duplicate_id() -> None:
    message = error_of(["D1", "D2", "D1"], week())
    assert "twice" in message
    assert "D1" in message
    assert "D2" not in message


@pytest.mark.parametrize("ids", [[], ["D1"]])
def test_fewer_than_two(ids: list[str]) -> None:
    message = error_of(ids, week())
    assert "at least two" in message
    for i in ids:
        assert i in message


def test_one_id_twice_is_not_two_segments() -> None:
    message = error_of(["D1", "D1"], week())
    assert "D1" in message


@pytest.mark.parametrize("state", [SegmentState.LOADING, SegmentState.REFRESHING])
def test_segment_not_online(state: SegmentState) -> None:
    segments = week()
    segments[2] = seg("D3", "2024-01-03", state=state, sub_partitions=frozenset({"eu", "us"}))
    message = error_of(["D2", "D3", "D4"], segments)
    assert "mergeable state" in message
    assert "D3" in message
    assert str(state) in message
    assert "D2" not in message
    assert "D4" not in message


def test_schema_versions_differ() -> None:
    segments = week()
    segments[3] = seg("D4", "2024-01-04", schema_version=2, sub_partitions=frozenset({"eu", "us"}))
    message = error_of(["D3", "D4"], segments)
    assert "schema version" in message
    assert "D3=v1" in message
    assert "D4=v2" in message


def test_sub_partition_sets_differ() -> None:
    segments = week()
    segments[4] = seg("D5", "2024-01-05", sub_partitions=frozenset({"eu"}))
    message = error_of(["D4", "D5", "D6"], segments)
    assert "sub-partition" in message
    assert "D4=['eu', 'us']" in message
    assert "D5=['eu']" in message
    assert "D6" in message


def test_sub_partitions_empty_vs_present() -> None:
    segments = [*week(), seg("E8", "2024-01-08")]
    message = error_of(["D7", "E8"], segments)
    assert "E8=[]" in message
    assert "D7=['eu', 'us']" in message


def test_gap_with_auto_merge() -> None:
    message = error_of(["D1", "D2", "D4"], week())
    assert "gap" in message
    assert "D2" in message
    assert "D4" in message
    assert day("2024-01-03").isoformat() in message  # where D2 ends
    assert day("2024-01-04").isoformat() in message  # where D4 starts


def test_overlap_with_auto_merge() -> None:
    segments = [*week(), seg("W", "2024-01-06", "2024-01-08", sub_partitions=frozenset({"eu", "us"}))]
    message = error_of(["D5", "D6", "W"], segments)
    assert "overlap" in message
    assert "D6" in message
    assert "W" in message


def test_contained_segment_is_an_overlap() -> None:
    segments = [*week(), seg("ALL", "2024-01-01", "2024-01-07", sub_partitions=frozenset({"eu", "us"}))]
    message = error_of(["ALL", "D3"], segments)
    assert "overlap" in message
    assert "ALL" in message
    assert "D3" in message


def test_auto_merge_cannot_be_mixed_with_rules_that_merge_across_gaps() -> None:
    with pytest.raises(ValidationError, match="cannot share a table"):
        TableSettings(rules=(BinPackRule(rule="bin_pack"), AutoMergeRule(rule="auto_merge")))


@pytest.mark.parametrize("settings", [BIN_PACK_ONLY, CARBON], ids=["bin_pack", "minor+major"])
def test_gaps_and_overlaps_allowed_without_auto_merge(settings: TableSettings) -> None:
    segments = [*week(), seg("W", "2024-01-06", "2024-01-08", sub_partitions=frozenset({"eu", "us"}))]
    gap = manual.plan("t", ["D1", "D4", "D7"], segments, settings)
    assert gap.output.range == TimeRange(day("2024-01-01"), day("2024-01-08"))
    assert gap.output.records == 100 + 400 + 700
    overlap = manual.plan("t", ["D6", "W"], segments, settings)
    assert overlap.output.range == TimeRange(day("2024-01-06"), day("2024-01-09"))


def test_merge_disabled_refuses() -> None:
    message = error_of(["D1", "D2"], week(), TableSettings(merge_enabled=False))
    assert "disabled" in message


def test_checks_apply_to_other_tables_too() -> None:
    segments = [seg("A", "2024-01-01", table="sales"), seg("B", "2024-01-02", table="sales")]
    with pytest.raises(ManualMergeError, match="table orders"):
        manual.plan("orders", ["A", "C"], segments, AUTO)
    plan = manual.plan("sales", ["A", "B"], segments, AUTO)
    assert plan.output.table == "sales"


# --- through the simulation: nothing changes on failure ----------------------------------------


def simulation() -> Simulation:
    sim = Simulation(load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["month"]}]}}))
    for s in week():
        sim.catalog.add(s)
    return sim


@pytest.mark.parametrize(
    "ids",
    [["D1", "D3"], ["D1", "nope"], ["D1"], ["D2", "D2"]],
    ids=["gap", "unknown", "one", "duplicate"],
)
def test_failed_manual_merge_changes_nothing(ids: list[str]) -> None:
    sim = simulation()
    before = copy.deepcopy(sim.catalog)
    with pytest.raises(ManualMergeError):
        sim.manual_merge("t", ids)
    assert sim.catalog == before
    assert sim.merges == []


def test_manual_merge_applies() -> None:
    sim = simulation()
    plan = sim.manual_merge("t", ["D1", "D2", "D3"])
    assert sim.merges == [plan]
    ids = {s.id for s in sim.catalog.segments("t")}
    assert ids == {plan.output.id, "D4", "D5", "D6", "D7"}
    assert sim.catalog.knows("t", "D1")  # merged away, still recognised
    assert sum(s.records for s in sim.catalog.segments("t")) == sum(100 * i for i in range(1, 8))
    # the merged segment can be merged again with its neighbour
    again = sim.manual_merge("t", [plan.output.id, "D4"])
    assert again.output.range == TimeRange(day("2024-01-01"), day("2024-01-01") + timedelta(days=4))

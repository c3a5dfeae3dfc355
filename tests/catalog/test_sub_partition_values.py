"""Listing and searching sub-partition values: what each declared value has built."""

from __future__ import annotations

from compactor.catalog.sub_partition_values import render_usage, value_usage
from compactor.domain.segments import SegmentState
from tests.helpers.segments import seg

SEGMENTS = [
    seg(
        "b",
        "2024-01-02",
        sub_partitions=frozenset({"EU-West", "us"}),
        sub_partition_states=(("us", SegmentState.LOADING),),
    ),
    seg("a", "2024-01-01", sub_partitions=frozenset({"EU-West", "apac"})),
]
DECLARED = ["EU-West", "us", "mars"]


def test_every_declared_value_then_undeclared_ones_held_by_segments() -> None:
    usage = {u.value: u for u in value_usage(SEGMENTS, DECLARED)}
    assert list(usage) == ["EU-West", "us", "mars", "apac"]
    assert usage["EU-West"].built_in == ("a", "b") and usage["EU-West"].not_built_in == ()
    assert usage["us"].built_in == ("b",) and usage["us"].states == (("b", "LOADING"),)
    assert usage["mars"].built_in == () and usage["mars"].declared
    assert not usage["apac"].declared and usage["apac"].built_in == ("a",)


def test_search_is_a_case_insensitive_substring_filter() -> None:
    assert [u.value for u in value_usage(SEGMENTS, DECLARED, "eu")] == ["EU-West"]
    assert [u.value for u in value_usage(SEGMENTS, DECLARED, "A")] == ["mars", "apac"]
    assert value_usage(SEGMENTS, DECLARED, "zz") == []


def test_render_counts_segments_and_flags_undeclared_values() -> None:
    text = render_usage(value_usage(SEGMENTS, DECLARED), 2)
    assert "b LOADING" in text
    assert "apac" in text and "(not declared: delete it or declare it)" in text
    assert render_usage([], 2).endswith("(no matching value)")

"""Seed 001's worked example, cases 1-7, plus a segment that defines time but built nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from compactor.domain.segments import Segment, SegmentState, TimeRange
from compactor.rules.coverage import coverage, render

DECLARED = ["P1", "P2", "P3", "P4"]


def year(y: int) -> datetime:
    return datetime(y, 1, 1, tzinfo=UTC)


def segment(sid: str, y: int, values: set[str], **kw: object) -> Segment:
    return Segment(
        sid,
        "model",
        TimeRange(year(y), year(y + 1)),
        loaded_at=year(y + 1),
        sub_partitions=frozenset(values),
        **kw,
    )  # type: ignore[arg-type]


# Segment 4 [2018, 2019) does not exist; segment 5 [2019, 2020) is reserved and built nothing.
SEGMENTS = [
    segment("S1", 2015, {"P1", "P2"}),
    segment("S2", 2016, {"P1", "P2", "P3"}),
    segment("S3", 2017, {"P1", "P2", "P4"}),
    segment("S5", 2019, set()),
]


def ask(start: int | None = None, end: int | None = None, *values: str):  # type: ignore[no-untyped-def]
    return coverage(SEGMENTS, DECLARED, year(start) if start else None, year(end) if end else None, values)


def test_case_1_no_time_condition_answers_with_every_segment() -> None:
    result = ask()
    assert [a.segment_id for a in result.answering] == ["S1", "S2", "S3", "S5"]
    assert result.range == TimeRange(year(2015), year(2020))
    assert result.undefined_ranges == (TimeRange(year(2018), year(2019)),)


def test_case_2_one_year_no_value_uses_segment_1() -> None:
    result = ask(2015, 2016)
    assert [(a.segment_id, a.values) for a in result.answering] == [("S1", ("P1", "P2"))]
    assert result.undefined_ranges == ()
    assert result.not_built == (("S1", "P3"), ("S1", "P4"))


def test_case_3_two_years_two_built_values_are_fully_served() -> None:
    result = ask(2015, 2017, "P1", "P2")
    assert [(a.segment_id, a.values) for a in result.answering] == [
        ("S1", ("P1", "P2")),
        ("S2", ("P1", "P2")),
    ]
    assert result.fully_served and result.undefined_ranges == () and result.undeclared == ()


def test_case_4_a_value_not_built_in_the_range_needs_the_fallback() -> None:
    result = ask(2015, 2016, "P3")
    assert result.not_built == (("S1", "P3"),)
    assert not result.fully_served
    assert [a.values for a in result.answering] == [()]


def test_case_5_an_undeclared_value_has_no_data() -> None:
    result = ask(2015, 2018, "P5")
    assert result.undeclared == ("P5",)
    assert result.answering == () and result.not_built == ()


def test_case_6_an_undefined_year_returns_empty_the_rest_is_served() -> None:
    result = ask(2015, 2019, "P1")
    assert result.undefined_ranges == (TimeRange(year(2018), year(2019)),)
    assert [(a.segment_id, a.values) for a in result.answering] == [
        ("S1", ("P1",)),
        ("S2", ("P1",)),
        ("S3", ("P1",)),
    ]
    assert result.fully_served


def test_case_7_a_segment_that_built_nothing_needs_the_fallback() -> None:
    result = ask(2015, 2020, "P1")
    assert result.not_built == (("S5", "P1"),)
    assert result.undefined_ranges == (TimeRange(year(2018), year(2019)),)
    assert "segment S5 has not built 'P1'" in render(result)


def test_values_match_exactly_and_case_sensitively() -> None:
    result = ask(2015, 2016, "p1")
    assert result.undeclared == ("p1",)


def test_refreshing_still_serves_loading_does_not() -> None:
    busy = segment(
        "S1",
        2015,
        {"P1", "P2"},
        sub_partition_states=(("P1", SegmentState.REFRESHING), ("P2", SegmentState.LOADING)),
    )
    result = coverage([busy], DECLARED, year(2015), year(2016), ["P1", "P2"])
    assert result.answering[0].values == ("P1",)
    assert result.not_built == (("S1", "P2"),)


@pytest.mark.parametrize("values", [(), ("P1",)])
def test_json_shape(values: tuple[str, ...]) -> None:
    data = coverage(SEGMENTS, DECLARED, year(2015), year(2016), values).to_json()
    assert set(data) == {"range", "answering", "undefined_ranges", "not_built", "undeclared", "fully_served"}
    assert data["answering"][0]["segment"] == "S1"

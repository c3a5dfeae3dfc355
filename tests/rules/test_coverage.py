"""Seed 001's worked example, cases 1-7, plus a segment that defines time but built nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from compactor.domain.segments import Segment, SegmentState, TimeRange
from compactor.rules.coverage import AnsweredBy, coverage, render

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
    segment("S1", 2015, {"P1", "P2"}, indexes=frozenset("AB")),
    segment("S2", 2016, {"P1", "P2", "P3"}, indexes=frozenset("AC")),
    segment("S3", 2017, {"P1", "P2", "P4"}, indexes=frozenset("ABC")),
    segment("S5", 2019, set()),
]
IF_ABLE = "answered by: indexes {} if they can answer, otherwise the pushdown query engine"


def ask(start: int | None = None, end: int | None = None, *values: str, able: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return coverage(
        SEGMENTS, DECLARED, year(start) if start else None, year(end) if end else None, values, able
    )


def test_case_1_no_time_condition_answers_with_every_segment() -> None:
    result = ask()
    assert [a.segment_id for a in result.answering] == ["S1", "S2", "S3", "S5"]
    assert result.range == TimeRange(year(2015), year(2020))
    assert result.undefined_ranges == (TimeRange(year(2018), year(2019)),)


def test_case_2_one_year_no_value_the_index_answers_if_it_can() -> None:
    result = ask(2015, 2016)
    assert [(a.segment_id, a.values, a.indexes) for a in result.answering] == [
        ("S1", ("P1", "P2"), ("A", "B"))
    ]
    assert result.undefined_ranges == () and result.not_built == ()
    assert result.answered_by is AnsweredBy.INDEX_IF_ABLE
    assert render(result).endswith(IF_ABLE.format("A, B"))


def test_case_3_two_years_two_built_values_judge_indexes_a_b_c() -> None:
    result = ask(2015, 2017, "P1", "P2")
    assert [(a.segment_id, a.values) for a in result.answering] == [
        ("S1", ("P1", "P2")),
        ("S2", ("P1", "P2")),
    ]
    assert result.fully_served and result.undefined_ranges == () and result.undeclared == ()
    assert result.indexes == ("A", "B", "C")
    assert render(result).endswith(IF_ABLE.format("A, B, C"))


def test_case_4_a_value_not_built_in_the_range_is_pushed_down() -> None:
    result = ask(2015, 2016, "P3")
    assert result.not_built == (("S1", "P3"),)
    assert not result.fully_served
    assert [a.values for a in result.answering] == [()]
    assert result.answered_by is AnsweredBy.PUSHDOWN
    assert "segment S1 has not built 'P3': the pushdown query engine answers" in render(result)


def test_case_5_an_undeclared_value_has_no_data() -> None:
    result = ask(2015, 2018, "P5")
    assert result.undeclared == ("P5",)
    assert result.answering == () and result.not_built == ()
    assert result.answered_by is AnsweredBy.NO_DATA
    assert render(result).endswith("answered by: no data")


def test_case_6_an_undefined_year_returns_empty_the_rest_judges_the_indexes() -> None:
    result = ask(2015, 2019, "P1")
    assert result.undefined_ranges == (TimeRange(year(2018), year(2019)),)
    assert [(a.segment_id, a.values) for a in result.answering] == [
        ("S1", ("P1",)),
        ("S2", ("P1",)),
        ("S3", ("P1",)),
    ]
    assert result.fully_served and result.answered_by is AnsweredBy.INDEX_IF_ABLE
    text = render(result)
    assert "no segment defines [2018-01-01T00:00:00+00:00, 2019-01-01T00:00:00+00:00): no data" in text
    assert text.endswith(IF_ABLE.format("A, B, C"))


def test_case_7_a_segment_without_any_index_is_pushed_down() -> None:
    result = ask(2015, 2020, "P1")
    assert result.not_built == (("S5", "P1"),)
    assert result.unindexed == ("S5",)
    assert result.undefined_ranges == (TimeRange(year(2018), year(2019)),)
    assert result.answered_by is AnsweredBy.PUSHDOWN
    assert "segment S5 has built no index: the pushdown query engine answers" in render(result)


@pytest.mark.parametrize(
    ("able", "answered_by", "verdict"),
    [
        (("A",), AnsweredBy.INDEX, "answered by: index A (built in every answering segment)"),
        (("B", "A"), AnsweredBy.INDEX, "answered by: index A (built in every answering segment)"),
        (("B",), AnsweredBy.PUSHDOWN, "no index of B is built in every segment"),
        (("C",), AnsweredBy.PUSHDOWN, "no index of C is built in every segment"),
    ],
)
def test_an_index_answers_only_when_every_segment_built_it(
    able: tuple[str, ...], answered_by: AnsweredBy, verdict: str
) -> None:
    """Case 3 when the caller knows which indexes can serve the question: S1 has A, B and S2 A, C."""
    result = ask(2015, 2017, "P1", "P2", able=able)
    assert result.answered_by is answered_by
    assert verdict in render(result)


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
    assert set(data) == {
        "range", "answering", "undefined_ranges", "not_built", "undeclared",
        "indexes", "unindexed", "usable", "fully_served", "pushdown", "answered_by",
    }  # fmt: skip
    assert data["answering"][0]["segment"] == "S1"


def test_with_pushdown_disabled_what_only_pushdown_could_answer_is_not_served() -> None:
    """Seed 001 names query pushdown as the prerequisite of the fallback: without it, a value not
    built in a segment (case 6) is not served, while a question the indexes serve still is."""
    off = coverage(SEGMENTS, DECLARED, year(2016), year(2017), ["P1", "P4"], pushdown=False)
    assert off.not_built == (("S2", "P4"),) and off.answered_by is AnsweredBy.NOT_SERVED
    text = render(off).splitlines()
    assert "segment S2 has not built 'P4': not served (pushdown disabled)" in text
    assert text[-1] == "not served: pushdown disabled (no index built in every answering segment serves it)"
    assert off.to_json()["answered_by"] == "not_served" and off.to_json()["pushdown"] is False
    served = coverage(SEGMENTS, DECLARED, year(2015), year(2016), (), pushdown=False)
    assert served.answered_by is AnsweredBy.INDEX_IF_ABLE
    assert render(served).endswith(
        "answered by: indexes A, B if they can answer, otherwise not served (pushdown disabled)"
    )
    indexed = coverage(SEGMENTS, DECLARED, year(2015), year(2016), (), able=("A",), pushdown=False)
    assert indexed.answered_by is AnsweredBy.INDEX, "an index serving it needs no pushdown"

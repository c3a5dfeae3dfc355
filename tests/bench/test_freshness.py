"""bench/freshness.py's reading of the record: when each merge came due, and the debt of plans due
and not yet committed."""

from __future__ import annotations

import pytest

from tests.bench import bench_module


@pytest.fixture(scope="module")
def freshness():  # type: ignore[no-untyped-def]
    return bench_module("freshness")


def merge(table: str, committed: float, removed: list[str], added: str) -> dict[str, object]:
    return {"table": table, "committed": committed, "removed": removed, "added": [added], "level": "day"}


def test_a_merge_is_due_when_its_last_input_is_known_and_an_output_when_it_commits(freshness) -> None:  # type: ignore[no-untyped-def]
    known = {"a": 10.0, "b": 12.0, "c": 20.0}
    found = [  # listed out of commit order: the later merge takes the earlier one's output
        merge("t", 25.0, ["d1", "c"], "w1"),
        merge("t", 13.0, ["a", "b"], "d1"),
        merge("u", 30.0, ["a", "never-loaded"], "x"),
    ]
    timed = freshness.due_times(found, known)
    assert [(m["added"], m["due"], m["wait_s"]) for m in timed] == [
        (["d1"], 12.0, 1.0),
        (["w1"], 20.0, 5.0),
        (["x"], None, None),
    ]
    assert known == {"a": 10.0, "b": 12.0, "c": 20.0}  # the loads' record is left as it was


def test_debt_counts_plans_due_and_not_committed_each_second_and_its_slope(freshness) -> None:  # type: ignore[no-untyped-def]
    timed = [
        {"due": 12.0, "committed": 13.0},
        {"due": 20.0, "committed": 25.0},
        {"due": None, "committed": 26.0},  # unknown: not counted
    ]
    debt, _ = freshness.debt_trend(timed, 10.0, 30.0)
    assert debt == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    growing = [{"due": float(t), "committed": 100.0} for t in range(10, 30)]  # one more each second
    _, rising = freshness.debt_trend(growing, 10.0, 30.0)
    assert rising == pytest.approx(60.0)

"""The benchmarks' targets as data (bench/harness/targets.py): each judged once, printed as one line,
saved as a verdict, and summed up for run_all's table without judging again."""

from __future__ import annotations

import pytest

from tests.bench import bench_module

targets = bench_module("harness.targets")
Target, judge, verdict_summary = targets.Target, targets.judge, targets.verdict_summary

RATE = Target("rate", "merges drained a second", 3.0, at_most=False, unit=" merges/s")
LAG = Target("lag_ms", "p99 event -> commit", 1000, unit=" ms")
REBUILDS = Target("rebuilds", "state rebuilds inside merges", 0)


@pytest.mark.parametrize(
    ("target", "value", "met"),
    [
        (RATE, 3.0, True),
        (RATE, 2.99, False),
        (LAG, 1000, True),
        (LAG, 1000.5, False),
        (REBUILDS, 0, True),
        (REBUILDS, 1, False),
        (LAG, None, None),
    ],
)
def test_a_bound_is_met_on_its_side_only_and_an_unmeasured_figure_is_neither(
    target: targets.Target, value: float | None, met: bool | None
) -> None:
    assert target.met(value) is met


def test_each_target_is_printed_once_and_saved_with_its_figure(capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = judge((RATE, LAG, REBUILDS), {"rate": 2.5, "lag_ms": 640.0, "rebuilds": None})

    assert capsys.readouterr().out.splitlines() == [
        "target: merges drained a second >= 3 merges/s: 2.5 merges/s, missed",
        "target: p99 event -> commit <= 1,000 ms: 640 ms, met",
        "target: state rebuilds inside merges <= 0: not measured",
    ]
    assert verdicts["rate"] == {
        "what": "merges drained a second",
        "bound": 3.0,
        "at_most": False,
        "unit": " merges/s",
        "value": 2.5,
        "met": False,
    }
    assert (verdicts["lag_ms"]["met"], verdicts["rebuilds"]["met"]) == (True, None)


def test_a_figure_the_script_forgot_is_its_mistake() -> None:
    with pytest.raises(KeyError, match="lag_ms"):
        judge((RATE, LAG), {"rate": 3.5})


def test_the_summary_names_what_was_missed_and_counts_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    missed = judge((RATE, LAG, REBUILDS), {"rate": 2.5, "lag_ms": 640.0, "rebuilds": None})
    all_met = judge((RATE, LAG), {"rate": 3.2, "lag_ms": 640.0})

    assert verdict_summary({"verdicts": missed}) == (
        "targets missed: merges drained a second 2.5 merges/s (bound >= 3 merges/s), 1 not measured"
    )
    assert verdict_summary({"verdicts": all_met}) == "targets: 2 met"
    assert verdict_summary({"rows": []}) == "", "results saved before verdicts were"

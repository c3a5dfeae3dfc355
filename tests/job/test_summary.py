"""The operator's line a minute: counts since the last line, and the catalog and lag now."""

from __future__ import annotations

from compactor.job.summary import Summary
from tests.helpers.harness import Harness

CONFIG = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 0]}]}}


def test_each_line_counts_what_happened_since_the_one_before(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(CONFIG)
    ticks = iter([0.0, 60.0, 121.0])
    summary = Summary(handler.view(), monotonic=lambda: next(ticks))
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    handler.control.on_lag(7)
    assert summary.line() == (
        "last 60s: 3 events, 1 merges, 0 failed, 0 conflicts lost, 0 dead letters; "
        "tracking 2 segments in 1 tables, 7 events behind the topic"
    )
    handler.control.on_lag(0)
    assert summary.line() == (
        "last 61s: 0 events, 0 merges, 0 failed, 0 conflicts lost, 0 dead letters; "
        "tracking 2 segments in 1 tables, 0 events behind the topic"
    )

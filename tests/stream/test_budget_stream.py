"""The stream keeps a table's write-amplification budget: optional merges wait once it is spent."""

from __future__ import annotations

from dataclasses import replace

from compactor.domain.events import MergeStatus
from tests.helpers.harness import Harness

MB = 1 << 20


def config(budget: float) -> dict[str, object]:
    layers = {"rule": "auto_merge", "levels": ["day", "week"]}
    return {"defaults": {"rules": [layers], "max_write_amplification": budget}}


def test_a_spent_budget_defers_the_week_merge(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(config(0.5))
    week = [replace(harness.day(i), bytes=100 * MB) for i in range(7)]  # whole days: only weeks merge
    handler.process(harness.loaded(*week))
    assert harness.results() == [], "rewriting 700 MB of 700 MB ingested would spend 1.0 of 0.5"
    value = handler.metrics.registry.get_sample_value
    assert value("compactor_write_amplification", {"table": "t"}) == 0.0


def test_within_the_budget_the_week_merges_and_is_counted(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(config(1.0))
    week = [replace(harness.day(i), bytes=100 * MB) for i in range(7)]
    handler.process(harness.loaded(*week))
    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    value = handler.metrics.registry.get_sample_value
    assert value("compactor_write_amplification", {"table": "t"}) == 1.0


def test_far_behind_its_events_the_job_defers_optional_merges_until_it_catches_up(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["day", "week"]}]},
                               "operations": {"defer_optional_over_lag": 100}})  # fmt: skip
    metrics = handler.metrics
    handler.control.on_lag(5000)  # the query's progress: 5,000 events behind
    week = [replace(harness.day(i), bytes=100 * MB) for i in range(7)]
    handler.process(harness.loaded(*week))
    assert harness.results() == [], "the week merge is optional"
    assert metrics.registry.get_sample_value("compactor_deferring_optional_merges") == 1.0
    handler.control.on_lag(None)  # a progress that could not tell the lag: not "behind"
    handler.process(harness.loaded(replace(harness.day(7), bytes=100 * MB)))
    assert harness.statuses() == [MergeStatus.SUCCEEDED], "no longer known to be behind: the week merges"
    assert metrics.registry.get_sample_value("compactor_deferring_optional_merges") == 0.0

"""The stream keeps a table's write-amplification budget: optional merges wait once it is spent."""

from __future__ import annotations

from dataclasses import replace

from compactor.domain.events import MergeStatus
from tests.stream.conftest import Harness

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
    value = handler.state.metrics.registry.get_sample_value
    assert value("compactor_write_amplification", {"table": "t"}) == 0.0


def test_within_the_budget_the_week_merges_and_is_counted(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(config(1.0))
    week = [replace(harness.day(i), bytes=100 * MB) for i in range(7)]
    handler.process(harness.loaded(*week))
    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    value = handler.state.metrics.registry.get_sample_value
    assert value("compactor_write_amplification", {"table": "t"}) == 1.0

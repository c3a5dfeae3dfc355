"""The per-table merging switch: taken from the stream, kept across restarts, shown in metrics."""

from __future__ import annotations

import pytest

from compactor.domain.events import CompactionRequested, MergeStatus
from compactor.errors import EventDecodeError
from tests.helpers.harness import DAY, Harness

MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}


def switch(harness: Harness, enabled: bool, table: str = "t") -> bytes:
    return harness.codec.encode_compaction_requested(CompactionRequested("r", table, DAY, merging=enabled))


def test_a_disabled_table_plans_nothing_across_a_restart_until_enabled(harness: Harness) -> None:
    harness.store.create("t")
    harness.store.create("u")
    handler = harness.handler(MINOR)
    handler.process([harness.envelope(switch(harness, False))])
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    other = [harness.day(i, sid=f"u{i}", table="u") for i in range(3)]
    handler.process(harness.loaded(*other))
    assert harness.statuses() == [MergeStatus.SUCCEEDED], "only the other table merged"
    assert harness.results()[0]["table"] == "u"
    assert handler.state.stats.disabled_attempts == 3
    gauge = handler.state.metrics.registry.get_sample_value
    assert gauge("compactor_merging_enabled", {"table": "t"}) == 0
    assert gauge("compactor_merging_enabled", {"table": "u"}) == 1

    restarted = harness.handler(MINOR)  # recovered from the catalog store
    assert not restarted.state.catalog.merging_enabled("t")
    restarted.process(harness.loaded(harness.day(3)))
    assert len(harness.results()) == 1, "still off after the restart"

    restarted.process([harness.envelope(switch(harness, True))])
    assert harness.statuses() == [MergeStatus.SUCCEEDED, MergeStatus.SUCCEEDED], "enabling evaluates at once"
    assert harness.results()[1]["table"] == "t"
    assert harness.handler(MINOR).state.catalog.merging_enabled("t"), "on is kept too"


def test_a_request_names_one_thing(harness: Harness) -> None:
    both = CompactionRequested("r", "t", DAY, rule="minor", merging=False)
    with pytest.raises(EventDecodeError, match="exactly one of"):
        harness.codec.decode_input(harness.codec.encode_compaction_requested(both))
    decoded = harness.codec.decode_input(switch(harness, False))
    assert isinstance(decoded, CompactionRequested) and decoded.merging is False

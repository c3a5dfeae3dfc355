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
    assert handler.stats.disabled_attempts == 3
    gauge = handler.metrics.registry.get_sample_value
    assert gauge("compactor_merging_enabled", {"table": "t"}) == 0
    assert gauge("compactor_merging_enabled", {"table": "u"}) == 1

    restarted = harness.handler(MINOR)  # recovered from the catalog store
    assert not restarted.catalog.merging_enabled("t")
    restarted.process(harness.loaded(harness.day(3)))
    assert len(harness.results()) == 1, "still off after the restart"

    restarted.process([harness.envelope(switch(harness, True))])
    assert harness.statuses() == [MergeStatus.SUCCEEDED, MergeStatus.SUCCEEDED], "enabling evaluates at once"
    assert harness.results()[1]["table"] == "t"
    assert harness.handler(MINOR).catalog.merging_enabled("t"), "on is kept too"


def test_a_request_names_one_thing(harness: Harness) -> None:
    both = CompactionRequested("r", "t", DAY, rule="minor", merging=False)
    with pytest.raises(EventDecodeError, match="exactly one of"):
        harness.codec.decode_input(harness.codec.encode_compaction_requested(both))
    decoded = harness.codec.decode_input(switch(harness, False))
    assert isinstance(decoded, CompactionRequested) and decoded.merging is False


def test_disabling_a_table_lets_its_queued_merges_run_and_starts_no_new_one(harness: Harness) -> None:
    """Seed 003: "disabling merge will immediately stop new merge jobs ... but any merge jobs already
    in the queue will still run"."""
    import threading

    from compactor.stream.merging.workers import thread_workers

    for table in ("busy", "t"):
        harness.store.create(table)
    held = harness.store.gates["busy"] = threading.Event()
    config = {**MINOR, "operations": {"max_concurrent_merges": 1}}
    handler = harness.handler(config, thread_workers(1))
    handler.process(harness.loaded(*(harness.day(i, sid=f"busy{i}", table="busy") for i in range(3))))
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))  # queued: no slot
    assert handler.merges.waiting.tables() == ["t"]
    handler.process([harness.envelope(switch(harness, False))])
    assert handler.merges.waiting.tables() == ["t"], "the queued merge stays queued"
    held.set()
    handler.settle()
    assert sorted(r["table"] for r in harness.results() if r["status"] is MergeStatus.SUCCEEDED) == [
        "busy",
        "t",
    ]
    handler.process(harness.loaded(*(harness.day(i) for i in range(3, 6))))
    assert len(harness.results()) == 2, "no new merge of the disabled table"


def test_an_event_of_a_segment_already_tracked_is_counted_as_redelivered(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    first = harness.loaded(harness.day(0))
    handler.process(first)
    handler.process(first)  # the same event again (a producer's retry)
    handler.process(harness.loaded(harness.day(1), harness.day(2)))  # merged away: d00 retired
    handler.process(first)  # and once more, after the merge
    assert handler.stats.redelivered_events == 2
    sample = handler.metrics.registry.get_sample_value
    assert sample("compactor_events_redelivered_total", {"table": "t"}) == 2
    assert harness.dead() == [], "a re-delivery is not an error"

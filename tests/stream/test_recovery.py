"""The durable catalog: saved every batch, read back at start-up without the tables' history,
caught up with what the tables recorded since, and checked against them when it cannot be sure."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from compactor.domain.events import MergeStatus, SegmentCompleted
from compactor.stream.recovery import UNANNOUNCED_GRACE, UNKNOWN_ROWS_ACTION
from tests.helpers.harness import DAY, Harness

MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 0]}]}}


def no_history(table: str) -> list:  # type: ignore[type-arg]
    raise AssertionError(f"start-up read the whole history of {table}")


def test_each_batch_saves_the_catalog_and_a_restart_reads_it_back_not_the_history(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    assert harness.catalog_store.saves >= 1
    merged = {s.id for s in handler.catalog.segments("t")}

    harness.store.history = no_history  # type: ignore[method-assign]
    restarted = harness.handler(MINOR)
    assert {s.id for s in restarted.catalog.segments("t")} == merged
    assert restarted.catalog.version("t") == harness.store.latest_version("t")


def test_a_save_that_failed_is_written_by_the_next_one(harness: Harness) -> None:
    """A save that failed (the warehouse out of reach) lost its journal: a later save then wrote a
    newer mark without those segments, and a restart never read them again (found reading the
    keeper after bench/years.py's outage ended a job in its final save)."""
    harness.store.create("t")
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(harness.day(0)))
    store = handler.keeper.catalog_store
    working = store.save

    def unreachable(changes: object) -> None:
        raise OSError("Connection refused")

    store.save = unreachable  # type: ignore[method-assign]
    with pytest.raises(OSError):
        handler.process(harness.loaded(harness.day(1)))  # the batch fails: Spark gives it again
    store.save = working  # type: ignore[method-assign]
    handler.process(harness.loaded(harness.day(2, sid="d02")))
    kept = {s.id for s in handler.catalog.segments("t")}

    harness.store.history = no_history  # type: ignore[method-assign]
    restarted = harness.handler(MINOR)
    assert {s.id for s in restarted.catalog.segments("t")} == kept
    assert set(harness.catalog_store.live["t"]) == kept


def test_commits_after_the_last_save_are_folded_in_at_restart(harness: Harness) -> None:
    harness.store.create("t")
    harness.handler(MINOR).process(harness.loaded(harness.day(0)))
    late = harness.store.load(harness.day(5, sid="late"))  # committed; the job died before its event
    restarted = harness.handler(MINOR)
    assert restarted.catalog.get("t", "late") == late


def test_when_the_log_no_longer_reaches_back_the_catalog_is_checked_against_the_table(
    harness: Harness,
) -> None:
    harness.store.create("t")
    harness.handler(MINOR).process(harness.loaded(harness.day(0)))
    harness.store.drop("t", "d00")  # someone deleted the segment's rows ...
    harness.store.load(harness.day(3, sid="stray"))
    harness.store.cleaned["t"] = set(range(harness.store.latest_version("t") + 1))  # ... and the log aged out
    restarted = harness.handler(MINOR)
    assert [s.id for s in restarted.catalog.segments("t")] == [], "the gone segment is dropped"
    assert restarted.catalog.version("t") == harness.store.latest_version("t")


def test_a_table_new_to_the_catalog_is_read_from_its_history_once(harness: Harness) -> None:
    harness.store.create("t")
    harness.store.load(harness.day(0))
    first = harness.handler(MINOR)
    assert [s.id for s in first.catalog.segments("t")] == ["d00"]
    harness.store.history = no_history  # type: ignore[method-assign]
    assert [s.id for s in harness.handler(MINOR).catalog.segments("t")] == ["d00"]


@pytest.mark.parametrize("restart", [False, True], ids=["same process", "after a restart"])
def test_a_reused_id_of_a_merged_away_segment_is_refused_and_an_exact_re_send_is_not(
    harness: Harness, restart: bool
) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    events = harness.loaded(harness.day(0), harness.day(1))
    handler.process(events)
    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    if restart:
        handler = harness.handler(MINOR)

    handler.process(events[:1])  # the producer sends d00's event again: harmless
    assert harness.dead() == []
    reused = replace(harness.day(0), range=harness.day(9).range)  # d00 again, for other data
    harness.store.load(reused)  # with rows, as a buggy producer would write them
    handler.process([harness.envelope(harness.codec.encode_segment_completed(SegmentCompleted(reused, DAY)))])
    ((reason, detail),) = harness.dead()
    assert reason == "duplicate_segment_id" and "merged away" in detail and "never reused" in detail
    assert handler.catalog.get("t", "d00") is None


def test_a_table_dropped_while_the_job_was_down_leaves_the_catalog(harness: Harness) -> None:
    harness.store.create("t")
    harness.handler(MINOR).process(harness.loaded(harness.day(0)))
    assert harness.catalog_store.live["t"]
    del harness.store.rows["t"], harness.store.commits["t"]
    restarted = harness.handler(MINOR)
    assert restarted.catalog.segments("t") == []
    assert harness.catalog_store.live["t"] == {}, "and the store forgets them too"


def test_rows_without_an_event_are_reported_only_when_the_event_is_still_missing_after_the_grace(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.store.create("t")
    harness.handler(MINOR).process(harness.loaded(harness.day(0)))
    harness.store.write_unrecorded(harness.day(3, sid="stray"))  # by a producer that never announces it
    harness.store.write_unrecorded(harness.day(4, sid="late"))  # its event on its way
    with caplog.at_level(logging.INFO, logger="compactor"):
        restarted = harness.handler(MINOR)
        assert "segment late is in Delta but not announced yet" in caplog.text
        assert "without compactor metadata" not in caplog.text, "a producer announces after it writes"
        restarted.process(harness.loaded(harness.day(4, sid="late")))
        harness.clock.now += UNANNOUNCED_GRACE
        restarted.process(harness.loaded(harness.day(5)))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"table t: segment stray is in Delta without compactor metadata: {UNKNOWN_ROWS_ACTION}"]
    caplog.clear()
    restarted.process(harness.loaded(harness.day(6)))
    assert "stray" not in caplog.text, "reported once"

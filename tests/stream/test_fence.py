"""A lost shard writes nothing more, from any thread: after `fence()`, the catalog is saved no
more, no event is published, and the job's threads for it stop (against the in-memory store;
`tests/delta/test_fenced_store.py` fences the Spark store's own writes)."""

from __future__ import annotations

import threading

import pytest

from compactor.errors import DeadLetterReason, Fenced
from compactor.job.ticker import Ticker
from compactor.stream.triggers import DeadLetter, Envelope
from tests.helpers.harness import Harness
from tests.stream.test_concurrency import three_loads, until

CONFIG = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}


def test_a_fenced_shard_saves_no_catalog_and_publishes_nothing(harness: Harness) -> None:
    handler = harness.handler(CONFIG)
    handler.process(three_loads(harness, "a"))
    published = len(harness.publisher.sent)
    handler.fence()
    with pytest.raises(Fenced):
        handler.keeper.save()
    handler.keeper.save_if_due()  # between batches: quietly nothing
    with pytest.raises(Fenced):
        handler.announcer.dead_letters(
            [DeadLetter(Envelope("a", b"?", "t/0/9"), DeadLetterReason.UNDECODABLE, "")]
        )
    with pytest.raises(Fenced):  # a batch that still runs fails: Spark records no offsets for it
        handler.process(three_loads(harness, "c"))
    assert len(harness.publisher.sent) == published


def test_a_fenced_shard_drains_without_writing_and_without_raising(harness: Harness) -> None:
    """A lost shard's stop drains it: found by the rejoin fault test, where the drain's catalog
    save raised `Fenced` into the supervisor and ended the job."""
    handler = harness.handler(CONFIG)
    handler.process(three_loads(harness, "a"))
    saved = harness.catalog_store.saves
    handler.fence()
    assert handler.drain(0.0) == 0
    assert harness.catalog_store.saves == saved


def test_a_stop_whose_catalog_save_fails_still_stops(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """An object store outage fails a shard's query; its restart stops it first, and the stop's
    catalog save failed too: found by bench/years.py, where that ended the whole job."""
    handler = harness.handler(CONFIG)
    handler.process(three_loads(harness, "a"))

    def unreachable(changes: object) -> None:
        raise OSError("Connection refused")

    handler.keeper.catalog_store.save = unreachable  # type: ignore[method-assign]
    assert handler.drain(0.0) == 0
    assert "the catalog could not be saved at the stop (OSError: Connection refused)" in caplog.text


def test_the_jobs_threads_for_a_fenced_shard_stop(harness: Harness) -> None:
    handler = harness.handler(CONFIG)
    upkeep_ran = threading.Event()

    def fenced_upkeep() -> None:
        upkeep_ran.set()
        raise Fenced("the shard's lease was lost")

    handler.upkeep = fenced_upkeep  # type: ignore[method-assign]
    ticker = Ticker(handler, every=0.05, watch_every=0.05).start()
    until(lambda: upkeep_ran.is_set())
    until(lambda: not ticker.running())
    assert ticker.stop.is_set()
    ticker.close(timeout=1)

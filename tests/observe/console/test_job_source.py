"""The console's view of a running job (the stream on an in-memory store): each table's row as
the job knows it, a table's page with its timeline, pending plans and merges in flight, and the
job's lock held only while the state is copied."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from markupsafe import escape

from compactor.config.loading import load_config
from compactor.observe.console import sources
from compactor.observe.console.app import console_app
from compactor.observe.console.sources import JobSource
from compactor.stream.merging.workers import thread_workers
from tests.helpers.harness import Harness

MINOR = {"rule": "minor", "level_thresholds": [3, 0]}
CONFIG: dict[str, Any] = {"defaults": {"rules": [MINOR]}, "tables": {"u": {"priority": 5}}}


def test_rows_say_what_each_table_awaits_and_what_it_merged(harness: Harness) -> None:
    """One merge a batch: u (priority 5) merges, t's merge waits its turn."""
    for table in "tu":
        harness.store.create(table)
    handler = harness.handler({**CONFIG, "operations": {"max_merges_per_batch": 1}})
    handler.process(
        harness.loaded(*(harness.day(i, sid=f"{table}{i}", table=table) for table in "tu" for i in range(3)))
    )
    source = JobSource(lambda: [handler], load_config(CONFIG))
    rows = {r.table: r for r in source.warehouse().rows}
    assert (rows["u"].segments, rows["u"].awaiting_segments, rows["u"].state) == (1, 0, "merged")
    assert rows["u"].merged_share == 1.0 and rows["u"].trend == "none"
    t = rows["t"]
    assert (t.segments, t.awaiting_segments, t.state, t.merging) == (3, 3, "waiting", True)
    assert t.word == "waiting: its turn for a merge slot (fair share)" and t.merged_share == 0.0
    assert t.awaiting_bytes == sum(s.bytes for s in handler.catalog.segments("t"))
    detail = source.table("t")
    assert detail is not None
    assert [p.inputs for p in detail.plans] == [("t0", "t1", "t2")] and detail.plans[0].rule == "minor"
    assert detail.overrides == frozenset() and detail.config["rules"][0]["rule"] == "minor"
    assert source.table("u").overrides == frozenset({"priority"})  # type: ignore[union-attr]
    assert [b.segment.id for b in detail.timeline.boxes] == ["t0", "t1", "t2"]
    assert source.table("nope") is None and not source.knows("nope") and source.knows("u")


def test_a_merge_in_flight_is_on_the_tables_page(harness: Harness) -> None:
    harness.store.create("t")
    gate = harness.store.gates["t"] = threading.Event()
    handler = harness.handler(CONFIG, workers=thread_workers(2))
    try:
        handler.process(harness.loaded(*(harness.day(i, sid=f"t{i}") for i in range(3))))
        source = JobSource(lambda: [handler], load_config(CONFIG), fresh_for=0.0)
        detail = source.table("t")
        assert detail is not None and len(detail.running_plans) == 1
        assert detail.running == frozenset({"t0", "t1", "t2"})
        page = console_app(source).test_client().get("/tables/t").text
        assert page.count('class="segment running"') == 3, "the inputs are dashed on the timeline"
        assert detail.running_plans[0] in page
        assert source.warehouse().rows[0].state == "merging"
    finally:
        gate.set()
        handler.settle(30)
        handler.close()


def test_the_warehouse_is_copied_a_chunk_at_a_time_and_reused_while_fresh(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch waits at most one chunk's copy; many page views within `fresh_for` copy once."""
    # the first page waits for the whole first copy here: on a loaded machine 600 tables' copy
    # outlasts the half second a page waits (that wait has a test of its own below)
    monkeypatch.setattr(sources, "FIRST_COPY_WAIT_S", 60.0)
    for i in range(600):
        harness.store.create(f"t{i:03d}")
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(*(harness.day(0, sid=f"s{i}", table=f"t{i:03d}") for i in range(600))))
    holds: list[float] = []
    real = handler.lock

    class Timed:
        def __enter__(self) -> None:
            real.acquire()
            self.at = time.perf_counter()

        def __exit__(self, *exc: object) -> None:
            holds.append(time.perf_counter() - self.at)
            real.release()

    handler.lock = Timed()  # type: ignore[assignment]
    source = JobSource(lambda: [handler], load_config(CONFIG), fresh_for=60.0)
    first = source.warehouse()
    assert len(first.rows) == 600 and len(holds) == 3, "600 tables: three chunks of 256"
    assert source.warehouse() is first and len(holds) == 3, "a second view within fresh_for copies nothing"


def test_an_outage_is_on_the_warehouse_page(harness: Harness) -> None:
    from tests.stream.test_outages import refused

    handler = harness.handler(CONFIG)
    outages = handler.runner.failures.outages
    assert outages is not None
    for table in "abc":
        outages.failed(table, refused())
    source = JobSource(lambda: [handler], load_config(CONFIG), fresh_for=0.0)
    (note,) = [n for n in source.warehouse().notes if n.startswith("outage since")]
    assert "3 table(s) failed with OSError/java.net.ConnectException; attempts paused" in note
    page = console_app(source).test_client().get("/").text
    assert "attempts paused until" in page


def test_a_tables_page_says_how_far_its_log_is_from_its_checkpoint(harness: Harness) -> None:
    config = {**CONFIG, "defaults": {**CONFIG["defaults"], "checkpoint_every": 3}}
    handler = harness.handler(config)
    handler.process(harness.loaded(*(harness.day(i) for i in range(5))))
    handler.keep_logs()  # the maintainer checkpoints the table's log
    source = JobSource(lambda: [handler], load_config(config), fresh_for=0.0)
    detail = source.table("t")
    assert detail is not None
    (note,) = [n for n in detail.notes if n.startswith("log: ")]
    assert note.startswith("log: 0 commit(s) since the checkpoint at version ")
    assert "the job's maintainer wrote 1 checkpoint(s)" in note
    assert str(escape(note)) in console_app(source).test_client().get("/tables/t").text


def test_a_slow_copy_is_replaced_behind_the_page_and_copies_are_spaced_by_their_cost() -> None:
    """A large warehouse: no page waits for its copy. The first page says the copy is being made,
    later ones are served from the last copy while the next one is made in the background, and
    copies are at least `took / COPY_SHARE` apart however often pages are asked."""
    from compactor.observe.console.sources import COPY_SHARE, FIRST_COPY_WAIT_S, WAIT_FOR_COPY_S, _Copy

    source = JobSource(lambda: [], load_config(CONFIG), fresh_for=0.0)
    made: list[object] = []
    release = threading.Event()

    def slow_read() -> Any:  # every copy slow, and waiting for the test
        release.wait(10)
        time.sleep(WAIT_FOR_COPY_S * 1.2)
        made.append(object())
        return made[-1]

    def copied(count: int) -> None:
        deadline = time.monotonic() + 10
        while len(made) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)

    source._read = slow_read  # type: ignore[method-assign]
    began = time.monotonic()
    placeholder = source.warehouse()
    assert FIRST_COPY_WAIT_S <= time.monotonic() - began < 5, "the first page waits a moment, no more"
    assert placeholder.rows == () and placeholder.notes == (
        "copying the job's state of 0 table(s); the rows appear when it is done",
    )
    assert source.warehouse().notes == placeholder.notes and made == [], "one first copy, not one a page"
    release.set()
    copied(1)
    first = source.warehouse()
    assert made == [first], "the first copy, made behind the pages"
    release.clear()

    assert source._latest is not None
    source._latest = replace(source._latest, at=time.monotonic() - 1000)  # stale by now
    began = time.monotonic()
    assert source.warehouse() is first and source.warehouse() is first, "served from the last copy"
    assert time.monotonic() - began < 5, "without waiting for the next (it waits 10 s for the test)"
    assert len(made) == 1
    release.set()
    copied(2)
    assert source.warehouse() is made[1], "the background copy replaced it"
    assert source.warehouse() is made[1] and len(made) == 2, "not stale until ten times its cost"

    took = 0.3
    assert not _Copy(first, time.monotonic() - 0.9 * took / COPY_SHARE, took).stale(0.0)  # type: ignore[arg-type]
    assert _Copy(first, time.monotonic() - 1.1 * took / COPY_SHARE, took).stale(0.0)  # type: ignore[arg-type]


def test_a_tables_page_refreshed_reads_its_whole_history_once(harness: Harness, monkeypatch: Any) -> None:
    """The page polls every 2 seconds: after the first view, only the commits since are read."""
    harness.store.create("t")
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(*(harness.day(i, sid=f"t{i}") for i in range(2))))
    whole_reads: list[str] = []
    read_history = harness.store.history

    def counted(table: str) -> Any:
        whole_reads.append(table)
        return read_history(table)

    monkeypatch.setattr(harness.store, "history", counted)
    source = JobSource(lambda: [handler], load_config(CONFIG), fresh_for=0.0)
    first = source.table("t")
    assert first is not None and whole_reads == ["t"]
    handler.process(harness.loaded(harness.day(2, sid="t2")))  # a third load: a merge commits
    again = source.table("t")
    assert again is not None and whole_reads == ["t"], "refreshed from the commits since, not whole"
    assert (len(first.merges), len(again.merges)) == (0, 1), "the merge's commit is on the page"

"""Replaced files are vacuumed on each table's schedule, at a time of the interval of its own (not
every table at once, nor at every start), and failures wait."""

from __future__ import annotations

import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from compactor.job.janitor import FIRST_DELAY, Janitor, vacuum_slot
from compactor.stream.handler import BatchHandler
from tests.helpers.harness import Harness

CONFIG = {
    "defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}], "vacuum": {"interval": "6h"}},
    "tables": {"off": {"vacuum": {"enabled": False}}},
}


def test_each_table_is_vacuumed_on_its_interval_after_a_first_delay(harness: Harness) -> None:
    for table in ("t", "off"):
        harness.store.create(table)
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0), harness.day(1, table="off", sid="o1")))
    janitor = janitor_of(handler)
    slot = vacuum_slot("t", timedelta(hours=6), harness.clock.now + FIRST_DELAY)
    assert harness.clock.now + FIRST_DELAY <= slot < harness.clock.now + FIRST_DELAY + timedelta(hours=6)
    assert janitor.run_due() == [], "nothing right after a start"
    harness.clock.now = slot - timedelta(seconds=1)
    assert janitor.run_due() == []
    harness.clock.now = slot
    assert [r.table for r in janitor.run_due()] == ["t"], "the table with vacuum off is left alone"
    assert harness.store.vacuums == [("t", timedelta(days=7), False)]
    harness.clock.now += timedelta(hours=5)
    assert janitor.run_due() == []
    harness.clock.now = slot + timedelta(hours=6)
    assert [r.table for r in janitor.run_due()] == ["t"]
    counted = handler.metrics.registry.get_sample_value("compactor_vacuums_total", {"table": "t"})
    assert counted == 2


def test_a_failed_vacuum_waits_for_the_next_interval(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0)))
    calls: list[str] = []

    def broken(table: str, *_: object, **__: object) -> object:
        calls.append(table)
        raise OSError("storage throttled")

    harness.store.vacuum = broken  # type: ignore[assignment,method-assign]
    janitor = janitor_of(handler, first_delay=timedelta(0))
    slot = vacuum_slot("t", timedelta(hours=6), harness.clock.now)
    harness.clock.now = slot
    assert janitor.run_due() == [] and calls == ["t"]
    harness.clock.now += timedelta(hours=1)
    assert janitor.run_due() == [] and calls == ["t"], "not retried at once"
    harness.clock.now = slot + timedelta(hours=6)
    assert janitor.run_due() == [] and calls == ["t", "t"], "tried at its next slot"


def test_a_check_with_nothing_due_looks_at_no_table(harness: Harness) -> None:
    for i in range(200):
        harness.store.load(harness.day(0, table=f"t{i}"))
    handler = harness.handler(CONFIG)
    janitor = janitor_of(handler, first_delay=timedelta(0))
    janitor.run_due()  # the tables join the heap, each at its first slot
    harness.clock.now += timedelta(hours=6)  # every table's first slot has come
    janitor.run_due()
    assert sorted({v[0] for v in harness.store.vacuums}) == sorted(f"t{i}" for i in range(200))
    looked: list[str] = []
    for_table = handler.configs.for_table
    handler.configs.for_table = lambda t: looked.append(t) or for_table(t)  # type: ignore[method-assign]
    upcoming = janitor.due.next_at()
    assert upcoming is not None and upcoming > harness.clock.now
    harness.clock.now = upcoming - timedelta(microseconds=1)
    for _ in range(100):
        assert janitor.run_due() == []
    assert looked == [], "no table's config read until one comes due"


def test_the_tables_vacuums_are_spread_over_the_interval_and_the_same_at_every_start(
    harness: Harness,
) -> None:
    """5,000 tables' first VACUUMs at one moment kept a job vacuuming for most of an hour."""
    tables = [f"t{i:04d}" for i in range(2400)]
    start = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)
    first = [vacuum_slot(t, timedelta(days=1), start) for t in tables]
    hours = Counter(int((slot - start).total_seconds() // 3600) for slot in first)
    assert sorted(hours) == list(range(24)) and max(hours.values()) < 2 * len(tables) / 24
    restarted = start + timedelta(hours=7, minutes=13)
    again = [vacuum_slot(t, timedelta(days=1), restarted) for t in tables]
    # a restart keeps every table's time of day: the slot after it, or the same one
    assert all((a - f) in (timedelta(0), timedelta(days=1)) for f, a in zip(first, again, strict=True))
    assert all(a >= restarted for a in again)


@given(
    st.text(min_size=1, max_size=20),
    st.integers(min_value=1, max_value=10 * 86400),
    st.integers(min_value=0, max_value=4 * 10**9),
)
def test_a_slot_is_the_first_of_its_tables_times_at_or_after_the_moment(
    table: str, seconds: int, moment: int
) -> None:
    interval, at = timedelta(seconds=seconds), datetime.fromtimestamp(moment, UTC)
    slot = vacuum_slot(table, interval, at)
    assert at <= slot < at + interval
    assert vacuum_slot(table, interval, slot) == slot
    assert vacuum_slot(table, interval, slot + timedelta(microseconds=1)) == slot + interval
    period = seconds * 10**6
    since_epoch = (slot - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert since_epoch % period == (zlib.crc32(table.encode()) * period >> 32) % period


def janitor_of(handler: BatchHandler, first_delay: timedelta = FIRST_DELAY) -> Janitor:
    """The janitor as a shard runs it beside the handler."""
    return Janitor(
        handler.catalog, handler.configs, handler.keeper.store, handler.clock, handler.metrics, first_delay
    )

"""Replaced files are vacuumed on each table's schedule, not at every start, and failures wait."""

from __future__ import annotations

from datetime import timedelta

from compactor.job.janitor import FIRST_DELAY, Janitor
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
    assert janitor.run_due() == [], "nothing right after a start"
    harness.clock.now += FIRST_DELAY
    assert [r.table for r in janitor.run_due()] == ["t"], "the table with vacuum off is left alone"
    assert harness.store.vacuums == [("t", timedelta(days=7), False)]
    harness.clock.now += timedelta(hours=5)
    assert janitor.run_due() == []
    harness.clock.now += timedelta(hours=1)
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
    assert janitor.run_due() == [] and calls == ["t"]
    harness.clock.now += timedelta(hours=1)
    assert janitor.run_due() == [] and calls == ["t"], "not retried at once"


def test_a_check_with_nothing_due_looks_at_no_table(harness: Harness) -> None:
    for i in range(200):
        harness.store.load(harness.day(0, table=f"t{i}"))
    handler = harness.handler(CONFIG)
    janitor = janitor_of(handler, first_delay=timedelta(0))
    assert len(janitor.run_due()) == 200
    looked: list[str] = []
    for_table = handler.configs.for_table
    handler.configs.for_table = lambda t: looked.append(t) or for_table(t)  # type: ignore[method-assign]
    harness.clock.now += timedelta(hours=5)
    for _ in range(100):
        assert janitor.run_due() == []
    assert looked == [], "no table's config read until one comes due"
    assert janitor.due.next_at() == harness.clock.now + timedelta(hours=1)


def janitor_of(handler: BatchHandler, first_delay: timedelta = FIRST_DELAY) -> Janitor:
    """The janitor as a shard runs it beside the handler."""
    return Janitor(
        handler.catalog, handler.configs, handler.keeper.store, handler.clock, handler.metrics, first_delay
    )

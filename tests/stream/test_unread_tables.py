"""Start-up of a big warehouse: only the first `eager` known tables' logs are read before the
first batch; each other table is caught up (its commits since the mark folded, a crash's
merges announced) before its first event, its first attempt or a purge, and by the sweep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compactor.config.loading import load_config
from compactor.domain.plans import make_plan
from compactor.stream.handler import SWEEP_PER_TICK
from tests.helpers.harness import Harness, between_batches

QUIET = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [0, 0]}]}}
MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 0]}]}}


def _reads(harness: Harness) -> list[str]:
    """The tables whose log the store is asked about from now on."""
    asked: list[str] = []
    original: Callable[..., Any] = harness.store.changes_since

    def changes_since(table: str, version: int) -> Any:
        asked.append(table)
        return original(table, version)

    harness.store.changes_since = changes_since  # type: ignore[method-assign]
    return asked


def _warehouse(harness: Harness, tables: list[str], late: bool = True) -> None:
    """Tables the catalog knows (one load each, saved), then (`late`) a load each after the
    last save."""
    for table in tables:
        harness.store.create(table)
    harness.handler(QUIET).process(harness.loaded(*(harness.day(0, table=t) for t in tables)))
    for table in tables if late else ():
        harness.store.load(harness.day(1, sid=f"late-{table}", table=table))


def test_start_up_reads_the_first_eager_tables_and_an_event_catches_its_table_up_first(
    harness: Harness,
) -> None:
    _warehouse(harness, ["a", "b", "c"])
    asked = _reads(harness)
    handler = harness.handler(QUIET, eager=1)
    assert asked == ["a"], "one log read before the first batch"
    catalog = handler.catalog
    assert catalog.get("a", "late-a") is not None and catalog.get("c", "late-c") is None
    assert catalog.version("c") == harness.store.latest_version("c") - 1, "the mark as saved"

    handler.process(harness.loaded(harness.day(2, sid="new-c", table="c")))
    assert asked[:2] == ["a", "c"], "c caught up before its event was admitted"
    assert {s.id for s in catalog.segments("c")} == {"d00", "late-c", "new-c"}
    assert catalog.version("c") == harness.store.latest_version("c")
    assert catalog.get("b", "late-b") is None, "b waits for its turn"


def test_a_crash_left_merge_is_announced_once_its_table_is_caught_up(harness: Harness) -> None:
    for table in ("a", "b"):
        harness.store.create(table)
    harness.handler(MINOR).process(harness.loaded(harness.day(0, table="a"), harness.day(0, table="b")))
    x, y = harness.store.load(harness.day(1, table="b")), harness.store.load(harness.day(2, table="b"))
    plan = make_plan("b", "minor", [x, y], output_level=1)
    harness.store.commit(plan, load_config(MINOR).for_table("b"))  # committed; then the job died

    handler = harness.handler(MINOR, eager=1)
    assert harness.results() == [], "b's log is not read yet"
    between_batches(handler)  # every table is due at start: b is caught up before its attempt
    (result,) = harness.results()
    assert result["plan_id"] == plan.plan_id and result["table_version"] == 3
    assert handler.catalog.get("b", plan.output.id) is not None
    assert [s.id for s in handler.catalog.segments("b")] == ["d00", plan.output.id]


def test_the_sweep_catches_up_the_rest_a_few_per_tick(harness: Harness) -> None:
    tables = [f"t{i:03d}" for i in range(SWEEP_PER_TICK + 5)]
    _warehouse(harness, tables, late=False)  # no other writer: only the sweep reads the logs
    handler = harness.handler(QUIET, eager=0)
    for table in tables:  # nothing due
        handler.planner.due.forget(table)
    asked = _reads(harness)
    between_batches(handler)
    assert asked == tables[:SWEEP_PER_TICK]
    between_batches(handler)
    assert asked == tables
    between_batches(handler)
    assert asked == tables, "each table once"


def test_a_table_others_wrote_to_is_caught_up_once_by_the_probe_or_the_sweep(harness: Harness) -> None:
    tables = [f"t{i:03d}" for i in range(SWEEP_PER_TICK + 5)]
    _warehouse(harness, tables)
    handler = harness.handler(QUIET, eager=0)
    asked = _reads(harness)
    for _ in range(3):
        between_batches(handler)
    assert sorted(asked) == tables, "each table once"
    assert all(handler.catalog.get(t, f"late-{t}") is not None for t in tables)


def test_a_new_table_is_read_at_start_up_whatever_the_eager_count(harness: Harness) -> None:
    _warehouse(harness, ["a"])
    harness.store.create("fresh")
    harness.store.load(harness.day(0, table="fresh"))
    handler = harness.handler(QUIET, eager=0)
    assert [s.id for s in handler.catalog.segments("fresh")] == ["d00"]
    assert handler.catalog.get("a", "late-a") is None

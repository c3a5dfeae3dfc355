"""An event that comes before what it announces is in Delta poisons nothing, and what it announced
is found in Delta without a restart (issue 49 item 10).

Before its table's first commit the event is `unknown_table`; the table is asked after again at
each of its events (never a remembered "no"), and when the job first reads the table it folds
the table's history, the early event's load included. A known table's load announced before its
commit is `rows_not_in_delta`; the probe of the tables' newest versions folds it once it lands.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment
from compactor.errors import Rejected
from compactor.stream.admission import KnownTables
from compactor.stream.triggers import Envelope
from tests.helpers.harness import DAY, Harness
from tests.helpers.memory_store import InMemoryTableStore

WEEKS = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}


def _announced(harness: Harness, segment: Segment) -> Envelope:
    """The segment's event, whether or not its rows are in the store."""
    return harness.envelope(harness.codec.encode_segment_completed(SegmentCompleted(segment, DAY)))


def test_a_table_refused_while_missing_is_asked_after_again_and_taken_once_there() -> None:
    store = InMemoryTableStore()
    tables = KnownTables(store)
    for _ in range(3):
        with pytest.raises(Rejected, match="no table 't'"):
            tables.require("t")
    store.create("t")
    tables.require("t")
    tables.require("t")
    assert tables.new == ["t"], "new to the job once"


def test_an_event_before_its_tables_first_commit_poisons_none_and_its_load_is_folded(
    harness: Harness,
) -> None:
    handler = harness.handler(WEEKS)
    handler.admission.tables.on_new = handler.keeper.follow  # as job.wiring wires it
    week = [harness.day(n) for n in range(7)]
    handler.process([_announced(harness, week[0])])  # the table's first commit is not there yet
    assert [r for r, _ in harness.dead()] == ["unknown_table"]

    for segment in week:
        harness.store.load(segment)  # the loads land, each with its record
    handler.process([_announced(harness, s) for s in week[1:]])
    handler.settle()

    assert [r for r, _ in harness.dead()] == ["unknown_table"], "the later events are taken"
    # d00 with them, in the first plan: the table's history is read before its first event is taken
    (merged,) = handler.catalog.segments("t")
    assert (merged.records, merged.range.start, merged.range.end) == (
        70,
        week[0].range.start,
        week[6].range.end,
    )
    assert harness.store.rows["t"] == {merged.id: 70} and len(harness.store.calls) == 1, "one merge"


def test_a_known_tables_load_announced_before_its_commit_is_folded_by_the_probe(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(WEEKS)
    week = [harness.day(n) for n in range(7)]
    handler.process(harness.loaded(*week[:6]))
    handler.process([_announced(harness, week[6])])  # ahead of its commit
    assert [r for r, _ in harness.dead()] == ["rows_not_in_delta"]

    harness.store.load(week[6])  # the commit lands; no event of the table follows
    handler.upkeep()  # its first round probes every table for versions the catalog has not folded

    assert handler.catalog.get("t", "d06") == week[6]


def test_a_table_whose_only_events_came_before_its_first_commit_is_found_by_the_upkeep(
    harness: Harness,
) -> None:
    """Its week's events were all refused (its first commit was still being written); the upkeep
    looks for the refused names again, finds the table, folds its loads and merges them, with no
    new event and no restart."""
    handler = harness.handler(WEEKS)
    week = [harness.day(n) for n in range(7)]
    handler.process([_announced(harness, s) for s in week])
    assert [r for r, _ in harness.dead()] == ["unknown_table"] * 7
    for segment in week:
        harness.store.load(segment)
    handler.upkeep()
    handler.settle()
    (merged,) = handler.catalog.segments("t")
    assert merged.records == 70 and handler.stats.merges == 1


def test_a_table_another_writer_loaded_is_attempted_at_once(harness: Harness) -> None:
    """A load with no event (another writer's) folded by the upkeep's probe makes its table due
    now, not at its next event or due time."""
    handler = harness.handler(WEEKS)
    week = [harness.day(n) for n in range(7)]
    handler.process(harness.loaded(*week[:6]))
    assert handler.stats.merges == 0
    harness.store.load(week[6])  # no event: another writer
    harness.clock.now += timedelta(seconds=1)
    handler.upkeep()
    handler.tick()
    handler.settle(timeout=5)
    assert handler.stats.merges == 1 and handler.catalog.segments("t")[0].records == 70

"""Deleted rows purged: found by a check of the table, queued by ratio, purged between batches."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.catalog.changes import SegmentAdded
from compactor.catalog.fold import SegmentCatalog
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import RowCount
from compactor.stream.purging import OtherWriters, Purges
from tests.helpers.harness import Clock, Harness, between_batches
from tests.helpers.segments import seg

# no rule merges anything here: what happens to the segments is the purge's doing
QUIET: dict[str, Any] = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [100, 0]}]}}


def quiet(**defaults: Any) -> dict[str, Any]:
    return {"defaults": QUIET["defaults"] | defaults}


def _loaded(harness: Harness, config: dict[str, Any]) -> Any:
    harness.store.create("t")
    handler = harness.handler(config)
    handler.process(harness.loaded(harness.day(0, records=100), harness.day(1, records=100)))
    return handler


def test_a_delete_past_the_ratio_is_found_on_a_quiet_table_and_purged(harness: Harness) -> None:
    handler = _loaded(harness, QUIET)
    harness.store.delete_rows("t", "d00", 30)  # another writer's DELETE; no event follows
    harness.store.delete_rows("t", "d01", 10)  # 10 %: under the default 20 %
    between_batches(handler)
    assert harness.store.purges == ["d00"]
    d00, d01 = (handler.catalog.get("t", sid) for sid in ("d00", "d01"))
    assert (d00.records, d00.deleted) == (70, 0), "purged: the hidden rows are gone from the files"
    assert (d01.records, d01.deleted) == (90, 10), "recounted, left as it is"
    assert handler.stats.purges == 1
    assert handler.catalog.version("t") == harness.store.latest_version("t")
    between_batches(handler)
    assert harness.store.purges == ["d00"], "nothing is purged twice"


def _deleted_in_two_tables(harness: Harness, config: dict[str, Any], t: int, u: int) -> Any:
    """Tables `t` and `u` (their own keys under `config["tables"]`) of one 100-row load each, `t`
    and `u` rows of it deleted by another writer, then two rounds between batches."""
    for table in ("t", "u"):
        harness.store.create(table)
    handler = harness.handler(config)
    handler.process(harness.loaded(harness.day(0, records=100), harness.day(0, records=100, table="u")))
    harness.store.delete_rows("t", "d00", t)
    harness.store.delete_rows("u", "d00", u)
    between_batches(handler)
    between_batches(handler)
    return handler


def test_the_ratio_is_per_table_and_null_turns_purging_off(harness: Harness) -> None:
    config = quiet(purge_deleted_ratio=0.05)
    config["tables"] = {"t": {"purge_deleted_ratio": None}, "u": {}}
    handler = _deleted_in_two_tables(harness, config, t=50, u=6)
    assert harness.store.purges == ["d00"]
    assert handler.catalog.get("u", "d00").deleted == 0
    assert handler.catalog.get("t", "d00").deleted == 50


def test_a_purge_is_handed_its_table_s_own_certify_merges(harness: Harness) -> None:
    """null: the store's (the job's) setting; a table's own false or true is handed on."""
    config = quiet()
    config["tables"] = {"t": {"certify_merges": False}, "u": {}}
    _deleted_in_two_tables(harness, config, t=50, u=50)
    assert harness.store.purges_certified == {("t", "d00"): False, ("u", "d00"): None}


def test_deleted_rows_show_in_metrics(harness: Harness) -> None:
    handler = _loaded(harness, quiet(purge_deleted_ratio=None))
    harness.store.delete_rows("t", "d00", 40)
    between_batches(handler)
    text = handler_metrics(handler)
    assert 'compactor_deleted_rows{table="t"} 40.0' in text
    assert 'compactor_deleted_rows_ratio{table="t"} 0.2' in text


def handler_metrics(handler: Any) -> str:
    from prometheus_client import generate_latest

    return generate_latest(handler.metrics.registry).decode()


def test_a_failed_purge_waits_and_a_restart_queues_what_a_crash_left(harness: Harness) -> None:
    handler = _loaded(harness, QUIET)
    harness.store.delete_rows("t", "d00", 50)
    harness.store.failures["d00"] = OSError("the object store refused")
    between_batches(handler)
    assert harness.store.purges == ["d00"]
    between_batches(handler)
    assert harness.store.purges == ["d00"], "not tried again before the retry time"
    handler.keeper.save(set())
    del harness.store.failures["d00"]
    restarted = harness.handler(QUIET)  # the catalog saved the recount: the restart knows
    between_batches(restarted)
    assert harness.store.purges == ["d00", "d00"]
    assert restarted.catalog.get("t", "d00").deleted == 0


def test_a_merge_takes_the_deleted_rows_with_it(harness: Harness) -> None:
    handler = _loaded(harness, QUIET)
    harness.store.delete_rows("t", "d00", 50)
    handler.keeper.save({"t"})  # the batch's check finds the DELETE and queues the purge ...
    handler.process(harness.loaded(*(harness.day(n, records=100) for n in range(2, 100))))
    between_batches(handler)  # ... but the level threshold merged d00 away first
    assert "d00" not in {s.id for s in handler.catalog.segments("t")}
    assert harness.store.purges == []


def test_a_re_sent_load_event_of_a_segment_with_deleted_rows_is_a_duplicate(harness: Harness) -> None:
    handler = _loaded(harness, quiet(purge_deleted_ratio=None))
    harness.store.delete_rows("t", "d00", 30)
    between_batches(handler)
    again = SegmentCompleted(harness.day(0, records=100), harness.clock.now)
    handler.process([harness.envelope(harness.codec.encode_segment_completed(again))])
    assert harness.dead() == []


# -- the queue and the prober on their own ------------------------------------------------


def test_the_queue_holds_a_segment_once_and_drops_it_when_merged_away() -> None:
    clock = Clock()
    purges = Purges(lambda table: 0.2, clock)
    catalog = SegmentCatalog()
    a = replace(seg("a", "2024-01-01", records=70), deleted=30)
    catalog.apply(SegmentAdded(a))
    purges.offer([a, a])
    assert len(purges) == 1
    assert purges.take(catalog, busy=lambda t: True) == [], "a table with a merge in flight waits"
    assert purges.take(catalog, busy=lambda t: False) == [a]
    purges.failed([a])
    assert purges.take(catalog, busy=lambda t: False) == []
    clock.now += timedelta(minutes=10)
    assert purges.take(catalog, busy=lambda t: False) == [a]
    purges.offer([replace(a, id="gone")])
    assert purges.take(catalog, busy=lambda t: False) == []
    assert len(purges) == 0, "a segment the catalog no longer holds leaves the queue"


def test_one_purge_takes_one_table_s_due_segments() -> None:
    purges = Purges(lambda table: 0.2, Clock())
    catalog = SegmentCatalog()
    found = [
        replace(seg(sid, "2024-01-01", table=table, records=50), deleted=50)
        for table, sid in [("t", "a"), ("u", "b"), ("t", "c")]
    ]
    for s in found:
        catalog.apply(SegmentAdded(s))
    purges.offer(found)
    assert [s.id for s in purges.take(catalog, busy=lambda t: False)] == ["a", "c"]
    assert [s.id for s in purges.take(catalog, busy=lambda t: False)] == ["b"]


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=20),
    st.one_of(st.none(), st.floats(0.01, 1.0)),
)
def test_exactly_the_segments_at_or_over_the_ratio_are_queued(
    counts: list[tuple[int, int]], ratio: float | None
) -> None:
    purges = Purges(lambda table: ratio, Clock())
    catalog = SegmentCatalog()
    segments = [
        replace(seg(f"s{i}", "2024-01-01", records=visible), deleted=hidden)
        for i, (visible, hidden) in enumerate(counts)
    ]
    for s in segments:
        catalog.apply(SegmentAdded(s))
    purges.offer(segments)
    taken = [s.id for s in purges.take(catalog, busy=lambda t: False)]
    expected = [
        s.id
        for s in segments
        if ratio is not None and s.deleted and s.deleted / (s.records + s.deleted) >= ratio
    ]
    assert taken == expected


def test_the_prober_walks_the_tables_in_slices_then_waits() -> None:
    probe = OtherWriters(every=60.0, per_round=2)
    asked: list[float] = []

    def tables() -> list[str]:
        asked.append(1.0)
        return ["a", "b", "c"]

    assert probe.due(0.0, tables) == ["a", "b"]
    assert probe.due(1.0, tables) == ["c"]
    assert probe.due(2.0, tables) == []
    assert len(asked) == 2, "between rounds the table list is not built"
    assert probe.due(61.0, tables) == ["a", "b"]


def test_a_recount_takes_delta_s_counts_only_where_rows_were_deleted() -> None:
    catalog = SegmentCatalog()
    for sid in ("a", "b", "c"):
        catalog.apply(SegmentAdded(seg(sid, "2024-01-01", records=100)))
    changed = catalog.recount("t", {"a": RowCount(70, 30), "b": RowCount(120, 0), "c": RowCount(-1, 5)})
    assert [(s.id, s.records, s.deleted) for s in changed] == [("a", 70, 30)]
    assert catalog.get("t", "b").records == 100, "rows added are the commits' to tell"


@pytest.mark.parametrize("visible, same", [(70, True), (71, False)])
def test_a_segment_with_hidden_rows_is_the_same_content_as_its_load(visible: int, same: bool) -> None:
    loaded = seg("a", "2024-01-01", records=100)
    known = replace(loaded, records=visible, deleted=30)
    assert known.same_content(loaded) is same

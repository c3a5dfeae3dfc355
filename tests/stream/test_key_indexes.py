"""Upsert tables' invalid-row counts from the key index: the table is read whole once (at the
first attempt, or after a restart with no snapshot to take back), then only each new load; another
writer's change is read again where it happened."""

from __future__ import annotations

import logging

import pytest

from compactor.config.layout import UpsertConfig
from compactor.domain.certificate import Fingerprint
from compactor.domain.events import CompactionRequested
from compactor.domain.plans import output_id, plan_id_for
from compactor.errors import ContentMismatch
from compactor.stream.handler import BatchHandler
from tests.helpers.harness import DAY, Harness, between_batches

UPSERT = {"primary_key": ["id"], "comparison_column": "v"}
CONFIG = {  # at most one segment is ever small (under 5.5 valid rows) and 100 invalid rows are far away
    "tables": {"t": {"upsert": UPSERT, "rules": [
        {"rule": "upsert_compaction", "invalid_records_threshold_count": 100, "max_records_per_segment": 11}
    ]}}
}  # fmt: skip


def keyed(harness: Harness, sid: str, keys: range, version: int) -> None:
    """The rows a load will hold: one per key, all at `version` (row hashes differ per row)."""
    harness.store.keyed.setdefault("t", {})[sid] = [(k, version, hash((sid, k))) for k in keys]


def counts(handler: BatchHandler) -> dict[str, int]:
    """The index's counts, checked against what it noted in the catalog's columns."""
    found = handler.planner.keys.invalid_counts("t", UpsertConfig.model_validate(UPSERT))
    columns = handler.catalog.columns("t")
    noted = {s.id: int(n) for s, n in zip(columns, columns.invalid, strict=True) if n}
    assert noted == found, "the catalog's column holds the index's counts"
    return found


def test_the_table_is_read_whole_once_then_each_load_alone_and_merges_are_followed(
    harness: Harness,
) -> None:
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(5, 15), 2)  # supersedes d00's keys 5-9
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0), harness.day(1)))
    assert harness.store.key_reads[0] == ("t", None), "the first attempt reads the table once"
    assert all(ids is not None for _, ids in harness.store.key_reads[1:])
    assert counts(handler) == {"d00": 5}

    request = CompactionRequested("r1", "t", DAY, segment_ids=("d00", "d01"))
    handler.process([harness.envelope(harness.codec.encode_compaction_requested(request))])
    merged = output_id(plan_id_for("t", "manual", ["d00", "d01"]))
    assert [s.id for s in handler.catalog.segments("t")] == [merged]
    keyed(harness, "d02", range(0, 3), 3)
    reads = len(harness.store.key_reads)
    handler.process(harness.loaded(harness.day(2, records=3)))
    assert harness.store.key_reads[reads:] == [("t", ("d02",))], "the load alone; the merge followed"
    assert counts(handler) == {merged: 8}, "d00's keys 0-2 and 5-9 are superseded, now in the merge"
    assert handler.planner.keys.rebuilds == 1

    restarted = harness.handler(CONFIG)  # a crash: the index lived in memory only
    reads = len(harness.store.key_reads)
    assert counts(restarted) == {merged: 8}
    assert harness.store.key_reads[reads:] == [("t", None)], "rebuilt from one read of the table"


def test_a_restart_takes_the_index_back_from_its_snapshot_and_reads_only_what_came_since(
    harness: Harness,
) -> None:
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(5, 15), 2)
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0), harness.day(1)))
    assert counts(handler) == {"d00": 5}
    between_batches(handler)  # between batches: a new index is saved at once
    stored_version, _ = harness.store.key_index_snapshots["t"]
    assert stored_version == handler.catalog.version("t")
    facts = handler.planner.keys.facts("t")
    assert facts is not None and facts.keys == 15 and facts.snapshot_version == stored_version
    assert facts.memory_bytes == 15 * 28, "28 bytes a key: hash, value, row hash, holder"
    registry = handler.metrics.registry  # type: ignore[attr-defined]
    scraped = {
        name: registry.get_sample_value(f"compactor_key_index_{name}", {"table": "t"})
        for name in ("keys", "bytes", "snapshot_version")
    }
    assert scraped == {"keys": 15, "bytes": 15 * 28, "snapshot_version": stored_version}

    request = CompactionRequested("r1", "t", DAY, segment_ids=("d00", "d01"))
    handler.process([harness.envelope(harness.codec.encode_compaction_requested(request))])
    merged = output_id(plan_id_for("t", "manual", ["d00", "d01"]))
    keyed(harness, "d02", range(0, 3), 3)
    handler.process(harness.loaded(harness.day(2, records=3)))  # after the snapshot: a merge, a load
    keyed(harness, "d03", range(3, 5), 4)

    restarted = harness.handler(CONFIG)  # a crash after the snapshot
    reads = len(harness.store.key_reads)
    assert counts(restarted) == {merged: 8}, "d00's keys 0-2 and 5-9 superseded, now in the merge"
    assert harness.store.key_reads[reads:] == [("t", ("d02",))], "the load since, alone; the merge followed"
    restarted.process(harness.loaded(harness.day(3, records=2)))
    assert counts(restarted) == {merged: 10}
    assert harness.store.key_reads[reads + 1 :] == [("t", ("d03",))]
    assert restarted.planner.keys.rebuilds == 0 and restarted.planner.keys.restored == 1


def test_a_damaged_snapshot_is_read_past_with_one_scan(harness: Harness) -> None:
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(5, 15), 2)
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0), harness.day(1)))
    between_batches(handler)
    stored_version, data = harness.store.key_index_snapshots["t"]
    harness.store.save_key_index("t", stored_version, lambda out: out.write(data[:100]))
    restarted = harness.handler(CONFIG)
    assert counts(restarted) == {"d00": 5}
    assert restarted.planner.keys.rebuilds == 1 and restarted.planner.keys.restored == 0


def test_another_writers_removal_is_read_again_where_it_happened(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(0, 4), 2)
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0), harness.day(1, records=4)))
    assert counts(handler) == {"d00": 4}

    harness.store.drop("t", "d01")  # another writer deleted the newer versions
    del harness.store.keyed["t"]["d01"]
    keyed(harness, "d02", range(20, 30), 1)
    reads = len(harness.store.key_reads)
    with caplog.at_level(logging.WARNING, "compactor.stream.key_indexes"):
        handler.process(harness.loaded(harness.day(2)))  # its probe finds the other writer's commit
    assert [s.id for s in handler.catalog.segments("t")] == ["d00", "d02"]
    assert counts(handler) == {}, "d00's rows are the latest again"
    assert harness.store.key_reads[reads:] == [("t", ("d02",))], "the new load alone, no whole read"
    assert harness.store.key_lookups == [("t", frozenset(range(4)), ())], "the keys d01 held, in the rest"
    keys = handler.planner.keys
    assert keys.rebuilds == 1 and keys.rereads == 1
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name.endswith("key_indexes") and r.levelno >= logging.WARNING
    ]
    assert len(said) == 1 and "cannot follow 1 segment(s)" in said[0] and "(d01)" in said[0], said


def test_an_attempt_near_a_load_looks_at_the_segments_whose_counts_it_changed(harness: Harness) -> None:
    dirty_at_3 = {"tables": {"t": {"upsert": UPSERT, "rules": [
        {"rule": "upsert_compaction", "invalid_records_threshold_count": 3, "max_records_per_segment": 11}
    ]}}}  # fmt: skip
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(10, 20), 1)
    handler = harness.handler(dirty_at_3)
    handler.process(harness.loaded(harness.day(0), harness.day(1)))
    assert handler.stats.empty_attempts >= 1 and len(handler.catalog.segments("t")) == 2

    keyed(harness, "d02", range(0, 4), 2)  # supersedes 4 of d00's rows: d00 is now worth rewriting
    handler.process(harness.loaded(harness.day(2, records=4)))
    assert not handler.planner.scope.was_full("t"), "an attempt near the load"
    merged = output_id(plan_id_for("t", "upsert_compaction", ["d00", "d02"]))
    assert sorted(s.id for s in handler.catalog.segments("t")) == sorted(["d01", merged])


def request_merge(harness: Harness, handler: BatchHandler, ids: list[str], request: str = "r1") -> str:
    asked = CompactionRequested(request, "t", DAY, segment_ids=tuple(ids))
    handler.process([harness.envelope(harness.codec.encode_compaction_requested(asked))])
    return plan_id_for("t", "manual", ids)


def test_a_merge_is_handed_what_the_index_says_its_inputs_win(harness: Harness) -> None:
    """The certificate's second opinion (`IndexedWinners`): the keys the inputs win and their
    winners' row hashes, and the table as the index knew it when the merge was handed out."""
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(5, 15), 2)  # wins 5-9 from d00
    keyed(harness, "d02", range(20, 30), 1)
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    plan = request_merge(harness, handler, ["d00", "d01"])
    given = harness.store.winners[plan]
    assert given is not None
    wins = [hash(("d00", k)) for k in range(5)] + [hash(("d01", k)) for k in range(5, 15)]
    assert given.winners == Fingerprint.of(15, sum(wins))
    assert dict(given.segments) == {"d00": 10, "d01": 10, "d02": 10}


@pytest.mark.parametrize(
    ("job_wide", "table", "handed"), [(True, False, False), (False, True, True), (False, None, False)]
)
def test_the_index_s_word_is_handed_only_where_the_table_s_merges_are_certified(
    harness: Harness, job_wide: bool, table: bool | None, handed: bool
) -> None:
    """A table's own `certify_merges` beats the job's; with no certificate there is nothing to
    check the index's word with, so its pass over the winners is not made."""
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(5, 15), 2)
    config = {
        "operations": {"certify_merges": job_wide},
        "tables": {"t": CONFIG["tables"]["t"] | {"certify_merges": table}},
    }
    handler = harness.handler(config)
    handler.process(harness.loaded(harness.day(0), harness.day(1)))
    plan = request_merge(harness, handler, ["d00", "d01"])
    assert plan in harness.store.winners, "the merge ran"
    assert (harness.store.winners[plan] is not None) is handed


def test_a_merge_refused_for_its_content_has_its_index_read_whole_again(harness: Harness) -> None:
    """The index may be what was wrong (its row hashes are not checked as it follows merges): it is
    read whole at the next use, not taken back from its snapshot."""
    keyed(harness, "d00", range(0, 10), 1)
    keyed(harness, "d01", range(5, 15), 2)
    handler = harness.handler(CONFIG)
    handler.process(harness.loaded(harness.day(0), harness.day(1)))
    between_batches(handler)  # a snapshot is saved: a plain restore would take it back
    assert "t" in harness.store.key_index_snapshots
    plan = plan_id_for("t", "manual", ["d00", "d01"])
    harness.store.failures[plan] = ContentMismatch(f"table t: plan {plan} not committed: the key index says")
    assert request_merge(harness, handler, ["d00", "d01"]) == plan
    keys = handler.planner.keys
    assert keys.rebuilds == 1 and keys.restored == 0
    reads = len(harness.store.key_reads)
    assert counts(handler) == {"d00": 5}
    assert harness.store.key_reads[reads:] == [("t", None)], "read whole, the snapshot passed over"
    assert keys.rebuilds == 2 and keys.restored == 0

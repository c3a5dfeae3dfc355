"""A job restarted beside an upsert table of 200,000 keys takes its key index back from the
snapshot on the warehouse (more than one piece of `HadoopFiles.chunk_bytes`): its first upsert
attempt reads the rows of the load that came after the snapshot and no row of the segments the
snapshot covers; the counts, and the compacted table, are exact (real Spark, Delta and Kafka)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from compactor.config.loading import load_config
from compactor.delta.rewrite.upsert import invalid_counts, latest_rows
from compactor.delta.warehouse.key_index_snapshots import KeyIndexSnapshots
from compactor.observe.status.table_status import key_index_line
from compactor.stream import merge_desk
from tests.helpers.accounts import TABLE, UPSERT, AccountLoads
from tests.helpers.harness import between_batches
from tests.helpers.key_reads import CountedReads
from tests.helpers.streaming import JobRunner

pytestmark = pytest.mark.integration

# ~28 bytes a key in a snapshot: 200,000 keys are more than one piece of a snapshot's transfer
KEYS = 200_000
PARTS = 4  # the keys come in four loads
CONFIG = load_config(
    {
        "tables": {
            TABLE: {
                "upsert": UPSERT,
                # compact once a segment holds 1,000 superseded rows: the late load makes a0 do
                "rules": [{"rule": "upsert_compaction", "invalid_records_threshold_count": 1000}],
            }
        }
    }
)


def test_a_restart_reads_back_the_key_index_and_only_the_load_since(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    accounts = AccountLoads.on_new_topics(spark, warehouse, kafka_bootstrap, unique)
    load, upsert = accounts.load, accounts.upsert
    per = KEYS // PARTS

    covered = [load(n, n * per, per, 1) for n in range(PARTS)]
    handler = accounts.handler(CONFIG)
    first = CountedReads(handler)
    JobRunner(spark, handler, accounts.kafka, tmp_path / "cp").run_until_quiet()
    between_batches(handler)  # between batches: the new index is saved
    assert [call.segment_ids for call in first.calls][:1] == [None], "the first job reads the table once"
    snapshot = KeyIndexSnapshots(handler.keeper.store.files, warehouse).describe(TABLE)
    assert snapshot is not None and snapshot["keys"] == KEYS
    assert snapshot["bytes"] > handler.keeper.store.files.chunk_bytes, "saved and taken back in pieces"
    assert "snapshot of version" in key_index_line(snapshot)
    handler.drain(60)

    # after the snapshot: a load that supersedes 2,000 keys of the first segment
    late = load(PARTS, 0, 2_000, 2)
    restarted = accounts.handler(CONFIG)
    reads = CountedReads(restarted)
    JobRunner(spark, restarted, accounts.kafka, tmp_path / "cp").run_until_quiet()

    assert restarted.planner.keys.restored == 1 and restarted.planner.keys.rebuilds == 0
    assert reads.calls, "the upsert attempt asked for the new load's keys"
    assert all(call.segment_ids is not None for call in reads.calls), "no read of the whole table"
    assert not reads.lookups, "nothing to read again: no other writer changed the table"
    read_from = set().union(*(call.read_from for call in reads.calls))
    assert read_from == {late} and not read_from & set(covered), "no row of what the snapshot covers"
    assert sum(call.rows for call in reads.calls) == 2_000

    segments = restarted.catalog.segments(TABLE)
    assert any(s.id.startswith("m-") for s in segments), "the superseded rows were compacted away"
    assert sum(s.records for s in segments) == KEYS, "each key once"
    load_order = merge_desk.load_order(restarted.catalog, TABLE)
    assert invalid_counts(spark, warehouse, TABLE, upsert, load_order) == {}
    assert restarted.planner.keys.invalid_counts(TABLE, upsert) == {}
    view = latest_rows(spark, warehouse, TABLE, upsert)
    assert view.count() == KEYS and view.filter(F.col("version") == 2).count() == 2_000
    restarted.close()

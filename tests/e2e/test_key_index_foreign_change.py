"""Another writer deletes rows of an upsert table in place while the job runs: the job reads
again only the segment the delete touched and, from the rest of the table, the rows of the keys
that segment held; never the whole table. The counts stay exact (real Spark, Delta and Kafka)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.upsert import invalid_counts
from compactor.stream import merge_desk
from tests.helpers.accounts import TABLE, UPSERT, AccountLoads
from tests.helpers.key_reads import CountedReads
from tests.helpers.streaming import JobRunner

pytestmark = pytest.mark.integration

CONFIG = load_config(
    {
        "tables": {
            TABLE: {
                "upsert": UPSERT,
                # counted, never compacted here (no segment is small: each holds over 30,000
                # valid rows): the counts are what the test reads
                "rules": [
                    {
                        "rule": "upsert_compaction",
                        "invalid_records_threshold_count": 10_000_000,
                        "max_records_per_segment": 60_000,
                    }
                ],
            }
        }
    }
)


def test_another_writers_delete_is_read_again_only_where_it_happened(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    accounts = AccountLoads.on_new_topics(spark, warehouse, kafka_bootstrap, unique)
    load, upsert = accounts.load, accounts.upsert

    older = load(0, 0, 50_000, 1)
    newer = load(1, 40_000, 50_000, 2)  # supersedes a0's accounts 40,000-49,999
    handler = accounts.handler(CONFIG)
    runner = JobRunner(spark, handler, accounts.kafka, tmp_path / "cp")
    runner.run_until_quiet()
    keys = handler.planner.keys
    assert keys.invalid_counts(TABLE, upsert) == {older: 10_000} and keys.rebuilds == 1

    # another writer deletes a1's accounts 40,000-44,999: a0's rows of them are the latest again
    DeltaTable.forPath(spark, table_uri(warehouse, TABLE)).delete(
        (F.col("segment_id") == newer) & (F.col("account") < 45_000)
    )
    reads = CountedReads(handler)
    other = load(2, 200_000, 40_000, 1)  # a load of other accounts: its attempt finds the delete
    runner.run_until_quiet()  # the batch reads the new load; the tick after it finds the delete
    recounted = handler.catalog.get(TABLE, newer)
    assert recounted is not None and recounted.records == 45_000

    expected = {older: 5_000}  # accounts 45,000-49,999 are still a1's
    assert keys.invalid_counts(TABLE, upsert) == expected  # as the table's next attempt reads them
    assert keys.rebuilds == 1 and keys.rereads == 1, "read again where it happened, not rebuilt"
    assert all(call.segment_ids is not None for call in reads.calls), "no read of the whole table"
    whole = set().union(*(call.read_from for call in reads.whole_segments))
    assert whole == {newer, other}, "read whole: the segment the delete touched, and the new load"
    (lookup,) = reads.lookups
    assert lookup.keys == 50_000, "the keys a1 held"
    assert lookup.read_from == {older} and lookup.rows == 10_000, "their rows in a0, and nothing else"

    load_order = merge_desk.load_order(handler.catalog, TABLE)
    assert invalid_counts(spark, warehouse, TABLE, upsert, load_order) == expected, "as a full scan counts"
    handler.close()

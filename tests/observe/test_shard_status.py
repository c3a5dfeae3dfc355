"""`compactor status`'s shard lines: each shard's partitions, job, lag and tables."""

from __future__ import annotations

from compactor.kafka.shards import ShardLayout
from compactor.observe.status.shard_status import render_shards, shard_statuses

LAYOUT = ShardLayout("segments", 2, 4)


def test_each_shard_shows_its_job_lag_and_tables() -> None:
    tables = [f"t{n}" for n in range(6)]
    statuses = shard_statuses(
        LAYOUT, {0: "compactor-run@h:1 (10.0.0.1)"}, {0: 5, 1: 2, 2: 7}, {0: 9, 1: 2, 2: 7, 3: 4}, tables
    )
    assert [(s.index, s.partitions, s.behind) for s in statuses] == [(0, (0, 2), 4), (1, (1, 3), 4)]
    assert sorted(t for s in statuses for t in s.tables) == tables, "every table in one shard"
    assert all(LAYOUT.shard_of(t) == s.index for s in statuses for t in s.tables)
    text = render_shards(LAYOUT, statuses).splitlines()
    assert text[0] == "shards: 2 over the 4 partition(s) of segments"
    assert text[1].startswith(
        "  shard 0 (partitions [0, 2]): compactor-run@h:1 (10.0.0.1); 4 event(s) behind; tables: "
    )
    assert text[2].startswith("  shard 1 (partitions [1, 3]): no job runs it; 4 event(s) behind; tables: ")
    assert statuses[1].to_json()["job"] is None


def test_without_kafka_the_lag_is_unknown() -> None:
    (first, _) = shard_statuses(LAYOUT, {}, {0: 1}, None, [])
    assert first.behind is None and "lag unknown; tables: no tables yet" in render_shards(LAYOUT, [first])

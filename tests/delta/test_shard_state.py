"""What jobs sharing a warehouse keep there: each shard's part of the one catalog table, and the
shard record that a different shard count is checked against and a reshard moves."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from compactor.catalog.store import CatalogChanges, StoreScope, TableMark
from compactor.delta.files import HadoopFiles
from compactor.delta.warehouse import catalog_table
from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
from compactor.delta.warehouse.shard_record import (
    ShardRecord,
    committed_offsets,
    read_record,
    record_uri,
    shard_checkpoint,
)
from compactor.errors import ShardCountMismatch
from compactor.job.resharding import settle_layout
from compactor.kafka.shards import ShardLayout
from tests.helpers.segments import seg

pytestmark = pytest.mark.integration

AT = datetime(2024, 3, 1, 12, tzinfo=UTC)
TOPIC = "segments"


def scope(shard: int, tables: set[str]) -> StoreScope:
    return StoreScope(f"shard-{shard}-of-2", lambda table: table in tables)


def test_each_shard_reads_and_rewrites_only_its_tables_of_the_one_catalog(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = DeltaCatalogStore(spark, warehouse, scope=scope(0, {"a"}))
    second = DeltaCatalogStore(spark, warehouse, scope=scope(1, {"b"}))
    for store, table in ((first, "a"), (second, "b")):
        for n in range(3):
            s = seg(f"{table}{n}", f"2024-01-0{n + 1}", table=table)
            store.save(CatalogChanges(live={(table, s.id): s}, marks={table: TableMark(n)}))
        store.save(CatalogChanges(live={(table, f"{table}0"): None}))
    journals = Path(first.journals_uri)
    assert sorted(p.name for p in journals.iterdir()) == ["shard-0-of-2", "shard-1-of-2"], "a journal each"

    reader = DeltaCatalogStore(spark, warehouse, writer=False).load()  # `compactor status`: every shard
    assert {t: sorted(s.id for s in ss) for t, ss in reader.segments.items()} == {
        "a": ["a1", "a2"], "b": ["b1", "b2"],
    }  # fmt: skip
    first.compact()
    second.compact()  # two blind appends to one table
    monkeypatch.setattr(catalog_table, "REWRITE_SLACK", 0)
    loaded = DeltaCatalogStore(spark, warehouse, scope=scope(0, {"a"})).load()  # rewrites a's rows only
    assert {t: sorted(s.id for s in ss) for t, ss in loaded.segments.items()} == {"a": ["a1", "a2"]}
    assert set(loaded.marks) == {"a"}
    rows = spark.read.format("delta").load(first.uri).where(F.col("part") == "current")
    assert rows.where(F.col("table") == "a").count() == 3, "a: two live rows and its mark"
    assert rows.where(F.col("table") == "b").count() == 7, (
        "b: its 7 rows as saved (3 live, 3 marks, 1 tombstone)"
    )
    other = DeltaCatalogStore(spark, warehouse, scope=scope(1, {"b"})).load()
    assert {t: sorted(s.id for s in ss) for t, ss in other.segments.items()} == {"b": ["b1", "b2"]}


def spark_checkpoint(root: Path, batches: dict[int, dict[str, int]], committed: int) -> None:
    """A checkpoint as Spark writes it: offsets/<batch> (version, metadata, one line per source)
    and commits/<batch> for the batches that finished."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, offsets in batches.items():
        metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
        (root / "offsets" / str(batch)).write_text(
            f"v1\n{json.dumps(metadata)}\n{json.dumps({TOPIC: offsets})}"
        )
        if batch <= committed:
            (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_first_layout_is_recorded_a_changed_count_refused_and_a_reshard_moves_the_offsets(
    spark: Any, warehouse: Path, tmp_path: Path
) -> None:
    files, catalog = HadoopFiles(spark), DeltaCatalogStore(spark, warehouse)
    checkpoint = tmp_path / "cp"
    # a job that ran unsharded: batch 1 committed up to these offsets, batch 2 never finished
    spark_checkpoint(
        checkpoint, {1: {"0": 5, "1": 7, "2": 0, "3": 2}, 2: {"0": 9, "1": 9, "2": 9, "3": 9}}, 1
    )
    assert committed_offsets(files, str(checkpoint), TOPIC) == {0: 5, 1: 7, 2: 0, 3: 2}
    one = ShardLayout(TOPIC, 1, 4)
    assert settle_layout(files, catalog, warehouse, checkpoint, one, False, AT) is None, "as it always ran"

    two = ShardLayout(TOPIC, 2, 4)
    refused = re.escape(
        "operations.shards is 2 over the 4 partition(s) of segments, but this warehouse's jobs run with "
        "1 shard (one job; no shard record yet); stop every job and start one with --reshard to change it"
    )
    with pytest.raises(ShardCountMismatch, match=refused):
        settle_layout(files, catalog, warehouse, checkpoint, two, False, AT)
    stale = checkpoint / "shards-2" / "shard-0"
    stale.mkdir(parents=True)  # an earlier run with 2 shards left this
    record = settle_layout(files, catalog, warehouse, checkpoint, two, True, AT)
    assert record == ShardRecord(2, 4, {0: 5, 1: 7, 2: 0, 3: 2}, AT.isoformat(timespec="seconds"))
    assert read_record(files, warehouse, TOPIC) == record and not stale.exists()
    assert shard_checkpoint(checkpoint, record, 1) == f"{checkpoint}/shards-2/shard-1"
    assert json.loads(two.starting_offsets(1, record.offsets)) == {TOPIC: {"1": 7, "3": 2}}
    assert settle_layout(files, catalog, warehouse, checkpoint, two, False, AT) == record, (
        "the same count runs"
    )

    # shard 0 of 2 went on to commit more; shard 1 never committed a batch of its own
    spark_checkpoint(checkpoint / "shards-2" / "shard-0", {0: {"0": 11, "2": 4}}, 0)
    four = ShardLayout(TOPIC, 4, 4)
    where = record_uri(warehouse, TOPIC)
    with pytest.raises(
        ShardCountMismatch, match=f"run with 2 shard.s. over 4 partition.s. .recorded in {where}."
    ):
        settle_layout(files, catalog, warehouse, checkpoint, four, False, AT)
    moved = settle_layout(files, catalog, warehouse, checkpoint, four, True, AT)
    assert moved is not None and moved.offsets == {0: 11, 1: 7, 2: 4, 3: 2}, (
        "newest of each shard, kept ones else"
    )


def test_a_fresh_warehouse_records_its_first_shard_count(spark: Any, warehouse: Path, tmp_path: Path) -> None:
    files = HadoopFiles(spark)
    layout = ShardLayout(TOPIC, 3, 6)
    record = settle_layout(
        files, DeltaCatalogStore(spark, warehouse), warehouse, tmp_path / "cp", layout, False, AT
    )
    assert record == ShardRecord(3, 6, {}, AT.isoformat(timespec="seconds"))

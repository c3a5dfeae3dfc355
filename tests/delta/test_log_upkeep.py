"""Checkpoints off the merge path, on real Spark and Delta: a merge commit that lands on a
multiple of the checkpoint interval writes none, and with the table's interval held it rebuilds
no state either; the maintainer writes the checkpoint of a table past its interval (delta-rs
loads leave none), from Delta's own writer."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from compactor.delta.commit.log_upkeep import HELD_INTERVAL, write_checkpoint
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.spark_store import SparkTableStore
from compactor.domain.plans import make_plan
from compactor.observe.metrics.spark_work import SparkWork
from compactor.stream.log_keeper import LogKeeper
from compactor.stream.reporting import NoMetrics
from tests.delta.test_direct_commit import merge_in_group, rust_load

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("driver_max_bytes", [0, 16 << 20], ids=["spark", "driver"])
def test_a_merge_on_the_checkpoint_interval_writes_no_checkpoint(
    spark: Any, warehouse: Path, driver_max_bytes: int
) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(10)]  # versions 0..9
    work = SparkWork(spark)
    commit = merge_in_group(
        spark,
        warehouse,
        make_plan("t", "minor", segments[:2]),
        MergeSettings(driver_max_bytes=driver_max_bytes),
    )
    assert commit.version == 10, "the version Delta's hook would checkpoint"
    log = warehouse / "t" / "_delta_log"
    assert not list(log.glob("*.checkpoint*")), "the merge wrote no checkpoint"
    # what holding the interval is for: Delta still counts the table's files for its commit
    # statistics on a checkpoint version, which rebuilds the whole state inside the merge
    assert work.summary(1)["state_rebuilds_in_merges"] == 1


def test_with_its_interval_held_a_merge_on_version_ten_rebuilds_no_state(spark: Any, warehouse: Path) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(9)]  # versions 0..8
    store = SparkTableStore(spark, str(warehouse))
    assert store.hold_checkpoint_interval("t", True) is True  # version 9
    assert store.hold_checkpoint_interval("t", True) is False, "already held"
    properties = spark.sql(f"SHOW TBLPROPERTIES delta.`{table_uri(warehouse, 't')}`").collect()
    assert {r.key: r.value for r in properties}["delta.checkpointInterval"] == str(HELD_INTERVAL)

    work = SparkWork(spark)
    commit = merge_in_group(spark, warehouse, make_plan("t", "minor", segments[:2]), MergeSettings())
    assert commit.version == 10
    assert work.summary(1)["state_rebuilds_in_merges"] == 0

    keeper = LogKeeper(store, lambda table: 10, NoMetrics(), hold=lambda table: True)
    # 11 commits and no checkpoint: past the table's checkpoint_every, whatever the property says
    assert keeper.keep({"t": 10}) == ["t"]
    assert store.last_checkpoint("t") == 10
    assert store.hold_checkpoint_interval("t", False) is True
    properties = spark.sql(f"SHOW TBLPROPERTIES delta.`{table_uri(warehouse, 't')}`").collect()
    assert "delta.checkpointInterval" not in {r.key for r in properties}, "given back"


def test_the_maintainer_checkpoints_a_table_past_its_interval(spark: Any, warehouse: Path) -> None:
    for i in range(12):  # delta-rs loads: versions 0..11, no checkpoint
        rust_load(warehouse, f"s{i}", i)
    store = SparkTableStore(spark, str(warehouse))
    assert store.last_checkpoint("t") == -1
    keeper = LogKeeper(store, lambda table: 10, NoMetrics())
    assert keeper.keep({"t": 11}) == ["t"]
    assert store.last_checkpoint("t") == 11
    assert (warehouse / "t" / "_delta_log" / f"{11:020d}.checkpoint.parquet").exists()
    assert keeper.facts()["t"].commits_since_checkpoint == 0
    assert keeper.keep({"t": 11}) == [], "not again"
    loaded = spark.read.format("delta").load(table_uri(warehouse, "t")).count()
    assert loaded == 12 * 20


def test_a_checkpoint_delta_fails_to_write_raises(spark: Any, tmp_path: Path) -> None:
    # a table being created: its log's folder is there, its first commit not yet. Delta's writer
    # refuses to checkpoint it, logs that as a warning and returns as if it had written
    (tmp_path / "t" / "_delta_log").mkdir(parents=True)
    raised: list[BaseException] = []

    def checkpoint() -> None:  # on a thread of its own, as the job's maintainer: no session active
        try:
            write_checkpoint(spark, table_uri(tmp_path, "t"))
        except Exception as exc:
            raised.append(exc)

    thread = threading.Thread(target=checkpoint)
    thread.start()
    thread.join()
    assert len(raised) == 1 and "DELTA_CHECKPOINT_NON_EXIST_TABLE" in str(raised[0])

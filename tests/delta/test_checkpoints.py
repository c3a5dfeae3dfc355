"""Checkpoints delta-spark writes, read by the job: a table with V2 checkpoints
(`delta.checkpointPolicy = v2`: a UUID-named top-level file in JSON or Parquet, its files in
sidecars, and the classic-named copy Delta writes for older readers) and a multi-part one. Their
live files are the ones Delta's snapshot lists and their merges commit directly; a checkpoint
missing a part is passed over, one the job cannot read leaves the files to Delta's snapshot,
said once in the log and in `compactor status`, and the merges still commit."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.client.loader import sample_rows
from compactor.config.loading import load_config
from compactor.delta.files import HadoopFiles
from compactor.delta.log.live_files import LiveFiles, load_live_files
from compactor.delta.log.reader import DeltaLogReader
from compactor.delta.paths import table_uri
from compactor.delta.spark_store import SparkTableStore
from compactor.delta.table_ops.writes import write_segment
from compactor.domain.plans import Commit, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.observe.metrics.spark_work import SparkWork
from tests.delta.test_direct_commit import commit_actions, rust_load, snapshot

pytestmark = pytest.mark.integration

# delta-spark 4.4's settings (DeltaSQLConf): the form of a V2 checkpoint's top-level file, and
# the most actions a checkpoint file holds (a sidecar of a V2 checkpoint, a part of a classic one)
TOP_LEVEL_FORMAT = "spark.databricks.delta.checkpointV2.topLevelFileFormat"
PART_SIZE = "spark.databricks.delta.checkpoint.partSize"
DAY = datetime(2024, 3, 1, tzinfo=UTC)
SETTINGS = load_config({"tables": {"t": {"rules": [{"rule": "minor"}]}}}).for_table("t")


@contextmanager
def session_conf(spark: Any, values: dict[str, str]) -> Iterator[None]:
    before = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def v2_table(spark: Any, warehouse: Path, loads: int) -> list[Segment]:
    """A table created with V2 checkpoints, loaded through Spark (as `SparkLoader` loads)."""
    spark.sql(
        f"CREATE TABLE delta.`{table_uri(warehouse, 't')}` (event_time TIMESTAMP, customer_id INT, "
        "amount DECIMAL(10,2), segment_id STRING) USING delta PARTITIONED BY (segment_id) "
        "TBLPROPERTIES ('delta.checkpointPolicy' = 'v2')"
    )
    return [load(spark, warehouse, day) for day in range(loads)]


def load(spark: Any, warehouse: Path, day: int) -> Segment:
    start, end = DAY + timedelta(days=day), DAY + timedelta(days=day + 1)
    segment = Segment(f"s{day}", "t", TimeRange(start, end), loaded_at=start)
    return write_segment(spark, warehouse, segment, sample_rows(spark, start, end, 20))


def checkpoint(spark: Any, warehouse: Path) -> int:
    """A checkpoint of the table's newest version, written by Delta; its version."""
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, table_uri(warehouse, "t")
    )
    state = delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    delta_log.checkpoint(state, jvm.scala.Option.empty())
    return int(state.version())


def deltas_files(spark: Any, warehouse: Path) -> set[str]:
    return {str(f.path()) for f in snapshot(spark, warehouse).allFiles().collectAsList()}


def read_afresh(spark: Any, warehouse: Path) -> LiveFiles:
    reader = DeltaLogReader(HadoopFiles(spark), table_uri(warehouse, "t"), "t")
    return load_live_files(reader, reader.files, reader.latest_version())


def is_direct(warehouse: Path, commit: Commit) -> bool:
    """Committed by the job's own transaction (its metadata has exact sizes; Delta's generic
    overwrite leaves them out)."""
    actions = commit_actions(warehouse, commit.version)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    return bool(json.loads(info["userMetadata"]).get("exact_sizes"))


def said(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


@pytest.mark.parametrize("form", ["json", "parquet"])
def test_a_v2_checkpoint_s_files_are_delta_s_and_the_table_merges_directly(
    spark: Any, warehouse: Path, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    segments = v2_table(spark, warehouse, 3)
    with session_conf(spark, {TOP_LEVEL_FORMAT: form, PART_SIZE: "1"}):  # a sidecar per action
        version = checkpoint(spark, warehouse)
    logs = warehouse / "t" / "_delta_log"
    hint = json.loads((logs / "_last_checkpoint").read_text())
    assert hint["version"] == version and hint["v2Checkpoint"]["path"].endswith(f".{form}")
    assert len(list((logs / "_sidecars").glob("*.parquet"))) == len(deltas_files(spark, warehouse)) > 1
    segments.append(load(spark, warehouse, 3))  # a commit after the checkpoint

    live = read_afresh(spark, warehouse)
    assert (live.checkpoint, live.skipped) == (version, [])
    assert {f.path for f in live.everything()} == deltas_files(spark, warehouse)

    store = SparkTableStore(spark, warehouse)
    assert store.commit_path("t") == "direct"
    work = SparkWork(spark)
    with caplog.at_level(logging.WARNING, logger="compactor.delta.log.live_files"):
        commit = store.commit(make_plan("t", "minor", segments[:2]), SETTINGS)
    assert is_direct(warehouse, commit) and commit.records_out == 40
    assert work.summary(1)["state_rebuilds"] == 0, "the cheap path: no state rebuilt"
    assert not said(caplog, "checkpoint"), "nothing to say"

    # the classic-named copy Delta writes for readers without V2 checkpoints (at log cleanup),
    # its files in the same sidecars, found with no `_last_checkpoint` naming it
    state = snapshot(spark, warehouse)
    jvm_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, table_uri(warehouse, "t")
    )
    at = int(state.checkpointProvider().version())
    state.checkpointProvider().createCompatibilityCheckpoint(
        spark._jsparkSession, jvm_log, jvm_log.logPath(), jvm_log.newDeltaHadoopConf()
    )
    assert (logs / f"{at:020d}.checkpoint.parquet").exists()
    files = deltas_files(spark, warehouse)
    (logs / hint["v2Checkpoint"]["path"]).unlink()
    (logs / "_last_checkpoint").unlink()
    live = read_afresh(spark, warehouse)
    assert live.checkpoint == at and {f.path for f in live.everything()} == files


def test_a_multi_part_checkpoint_is_read_and_one_missing_a_part_is_passed_over_once(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """(Not in the `warehouse` fixture: the table is left with a broken checkpoint.)"""
    warehouse = tmp_path / "wh"
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(4)]
    with session_conf(spark, {PART_SIZE: "2"}):
        version = checkpoint(spark, warehouse)
    logs = warehouse / "t" / "_delta_log"
    parts = int(json.loads((logs / "_last_checkpoint").read_text())["parts"])
    assert parts == 2
    live = read_afresh(spark, warehouse)
    assert live.checkpoint == version and {f.path for f in live.everything()} == deltas_files(
        spark, warehouse
    )

    # a multi-part checkpoint is not written atomically: a part can be missing, and readers
    # ignore such a checkpoint (the protocol): the commits before it serve
    (logs / f"{version:020d}.checkpoint.{2:010d}.{parts:010d}.parquet").unlink()
    live = read_afresh(spark, warehouse)
    assert live.checkpoint == -1 and "is missing" in live.skipped[0]
    assert {f.path for f in live.everything()} == deltas_files(spark, warehouse)

    store = SparkTableStore(spark, warehouse)
    with caplog.at_level(logging.WARNING, logger="compactor.delta.log.live_files"):
        first = store.commit(make_plan("t", "minor", segments[:2]), SETTINGS)
        store.live_files("t").forget()  # loaded again: the same checkpoint passed over again
        second = store.commit(make_plan("t", "minor", segments[2:]), SETTINGS)
    assert is_direct(warehouse, first) and is_direct(warehouse, second)
    assert len(said(caplog, "passed over")) == 1, "said once"
    assert store.commit_path("t") == "direct"
    assert spark.read.format("delta").load(table_uri(warehouse, "t")).count() == 80


def test_a_checkpoint_the_job_cannot_read_leaves_the_files_to_delta_said_once(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A V2 checkpoint holding an action no checkpoint of the job's protocol holds (a form newer
    than the job: Delta's reader skips what it does not know), the commits before it cleaned up:
    the files come from Delta's snapshot, the merges still commit directly, the log says so
    once and `compactor status` says so. (Not in the `warehouse` fixture: the log is damaged.)"""
    warehouse = tmp_path / "wh"
    segments = v2_table(spark, warehouse, 4)
    version = checkpoint(spark, warehouse)
    logs = warehouse / "t" / "_delta_log"
    top = logs / json.loads((logs / "_last_checkpoint").read_text())["v2Checkpoint"]["path"]
    with top.open("a") as f:
        f.write(json.dumps({"futureAction": {"files": "elsewhere"}}) + "\n")
    (logs / f".{top.name}.crc").unlink()  # Hadoop's checksum of the file as Delta wrote it
    for v in range(version):  # log cleanup: only the checkpoint holds the versions up to it
        (logs / f"{v:020d}.json").unlink()

    store = SparkTableStore(spark, warehouse)
    path = store.commit_path("t")
    assert path.startswith("direct, the table's files from Delta's snapshot (") and "futureAction" in path
    with caplog.at_level(logging.WARNING, logger="compactor.delta.log.live_files"):
        first = store.commit(make_plan("t", "minor", segments[:2]), SETTINGS)
        store.live_files("t").forget()  # loaded again: from Delta again, not said again
        second = store.commit(make_plan("t", "minor", segments[2:]), SETTINGS)
    assert is_direct(warehouse, first) and is_direct(warehouse, second)
    named = said(caplog, "cannot read its checkpoint")
    assert len(named) == 1 and "futureAction" in named[0] and "Delta's" in named[0], "said once"
    assert store.commit_path("t").startswith("direct, the table's files from Delta's snapshot (")
    assert spark.read.format("delta").load(table_uri(warehouse, "t")).count() == 80

"""Direct commits on real Spark and Delta: a merge removes exactly its inputs' files and adds the
output's in one transaction, runs one Spark job and no state rebuild, leaves no transaction id,
and stays as safe as Delta's own overwrite against concurrent writers and a lagging catalog."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from delta.tables import DeltaTable
from deltalake import CommitProperties, write_deltalake
from pyspark.errors.exceptions import captured

from compactor.config.loading import load_config
from compactor.delta import features
from compactor.delta.commit.transaction import DirectTransaction
from compactor.delta.files import HadoopFiles
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.log.live_files import LiveFileIndex
from compactor.delta.log.reader import DeltaLogReader
from compactor.delta.paths import table_uri
from compactor.delta.rewrite import index_check
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.spark_store import SparkTableStore
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.plans import MergePlan, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import CommitConflict, StalePlan
from compactor.observe.metrics.spark_work import SparkWork

pytestmark = pytest.mark.integration

HOUR = datetime(2024, 5, 1, tzinfo=UTC)


def rust_load(
    warehouse: Path,
    sid: str,
    hour: int,
    rows: int = 20,
    table: str = "t",
    configuration: dict[str, str] | None = None,
) -> Segment:
    """A load as delta-rs writes it: one commit with the load record, no checksum file.
    `configuration`: the table's properties, when this load creates it."""
    start = HOUR + timedelta(hours=hour)
    segment = Segment(sid, table, TimeRange(start, start + timedelta(hours=1)), loaded_at=start, records=rows)
    data = pa.table(
        {
            "ts": pa.array([start + timedelta(seconds=i) for i in range(rows)], pa.timestamp("us", tz="UTC")),
            "k": pa.array([hour * 1000 + i for i in range(rows)], pa.int64()),
            "v": pa.array([float(i) for i in range(rows)], pa.float64()),
            "segment_id": pa.array([sid] * rows),
        }
    )
    write_deltalake(
        table_uri(warehouse, table),
        data,
        mode="append",
        partition_by=["segment_id"],
        configuration=configuration,
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": commit_metadata("load", [segment])}
        ),
    )
    return segment


def commit_actions(warehouse: Path, version: int, table: str = "t") -> list[dict[str, Any]]:
    text = (warehouse / table / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def live_paths(spark: Any, warehouse: Path, segment_ids: set[str], table: str = "t") -> set[str]:
    files = (
        DeltaTable.forPath(spark, table_uri(warehouse, table))
        .toDF()
        .where(f"segment_id IN ({', '.join(repr(s) for s in sorted(segment_ids))})")
    )
    return {f.rsplit(f"/{table}/", 1)[1] for f in files.inputFiles()}


def snapshot(spark: Any, warehouse: Path, table: str = "t") -> Any:
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, table_uri(warehouse, table)
    )
    return delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())


def before_each_commit(monkeypatch: pytest.MonkeyPatch, move: Callable[[DirectTransaction], object]) -> None:
    """Another writer's `move` between a transaction's read and each of its commit calls."""
    commit = DirectTransaction.commit

    def after_the_move(self: DirectTransaction, *args: Any, **kwargs: Any) -> int:
        move(self)
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(DirectTransaction, "commit", after_the_move)


def merge_in_group(spark: Any, warehouse: Path, plan: MergePlan, settings: MergeSettings) -> Any:
    """`execute_merge` under the merge's job group, as the store runs it."""
    context = spark.sparkContext
    context.setLocalProperty("spark.jobGroup.id", f"compactor-merge-{plan.plan_id}")
    try:
        return execute_merge(spark, warehouse, plan, settings)
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)


def test_a_merge_on_a_worker_thread_commits_over_a_checkpoint_written_meanwhile(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's maintainer checkpoints a table while a merge runs on a worker thread, whose JVM
    thread has no active session: Delta's commit statistics read the new checkpoint's size, which
    needs one. Found by bench/log_upkeep.py: the commit landed, then raised
    DELTA_SPARK_SESSION_NOT_SET, and the merge was reported failed."""
    import threading

    from compactor.delta.commit.log_upkeep import write_checkpoint

    inputs = [rust_load(warehouse, f"s{i}", i) for i in range(12)]
    plan = make_plan("t", "minor", inputs[:2])
    before_each_commit(monkeypatch, lambda txn: write_checkpoint(spark, table_uri(warehouse, "t")))
    outcome: list[Any] = []

    def merge() -> None:
        spark._jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
        try:
            outcome.append(execute_merge(spark, warehouse, plan, MergeSettings(driver_max_bytes=16 << 20)))
        except Exception as exc:
            outcome.append(exc)

    worker = threading.Thread(target=merge)
    worker.start()
    worker.join(120)
    (result,) = outcome
    assert not isinstance(result, Exception), result
    assert result.version == 12 and [o.id for o in result.outputs] == [plan.output.id]


def test_a_commit_runs_with_the_jobs_session_active_on_a_thread_that_had_none(spark: Any) -> None:
    """What the test above cannot force (Delta loads a new checkpoint's provider asynchronously,
    and only an unfinished load needs the session): the session a commit runs under is active in
    the worker's thread whatever the commit's settings, and the thread is left as it was found."""
    import threading

    from compactor.delta.sessions import active_session

    sessions = spark._jvm.org.apache.spark.sql.SparkSession
    seen: list[bool] = []

    def commit_thread() -> None:
        sessions.clearActiveSession()
        for settings in ({}, {"spark.databricks.delta.maxCommitAttempts": "0"}):
            with active_session(spark, settings):
                seen.append(bool(sessions.getActiveSession().isDefined()))
            seen.append(bool(sessions.getActiveSession().isDefined()))

    worker = threading.Thread(target=commit_thread)
    worker.start()
    worker.join(60)
    assert seen == [True, False, True, False]


@pytest.mark.parametrize(("driver_max_bytes", "jobs"), [(0, 1), (16 << 20, 0)], ids=["spark", "driver"])
def test_a_merge_removes_exactly_its_inputs_files_in_at_most_one_job_without_a_state_rebuild(
    spark: Any, warehouse: Path, driver_max_bytes: int, jobs: int
) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(4)]
    path = table_uri(warehouse, "t")
    before = rows_checksum(spark.read.format("delta").load(path))
    inputs = live_paths(spark, warehouse, {"s1", "s2"})
    plan = make_plan("t", "minor", segments[1:3])

    work = SparkWork(spark)
    commit = merge_in_group(spark, warehouse, plan, MergeSettings(driver_max_bytes=driver_max_bytes))
    done = work.summary(1)

    actions = commit_actions(warehouse, commit.version)
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    added = [a["add"] for a in actions if "add" in a]
    assert removed == inputs, "exactly the inputs' files, named from the job's own records"
    assert all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    assert [a["partitionValues"]["segment_id"] for a in added] == [plan.output.id]
    assert added[0]["dataChange"] is False and json.loads(added[0]["stats"])["numRecords"] == 40
    assert not [a for a in actions if "txn" in a], "no per-plan transaction id"
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert json.loads(info["userMetadata"])["plan_id"] == plan.plan_id
    assert json.loads(info["userMetadata"])["exact_sizes"] is True
    assert (commit.records_out, commit.bytes_out) == (40, added[0]["size"])
    assert (done["merge_jobs"], done["state_rebuilds"]) == (jobs, 0), done
    # the version before the merge was delta-rs's, with no checksum: the job wrote it, and
    # Delta derived the merge's own from it
    assert (warehouse / "t" / "_delta_log" / f"{commit.version - 1:020d}.crc").exists()
    assert (warehouse / "t" / "_delta_log" / f"{commit.version:020d}.crc").exists()
    assert bool(
        snapshot(spark, warehouse).validateChecksum(
            spark._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({})
        )
    )
    assert rows_checksum(spark.read.format("delta").load(path)) == before


@pytest.mark.parametrize("driver_max_bytes", [0, 16 << 20], ids=["spark", "driver"])
def test_a_merge_raises_no_exception_across_py4j(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch, driver_max_bytes: int
) -> None:
    """Each JVM exception pyspark sees is converted with a dozen class lookups by name: walking a
    Java collection through py4j ends in one, and a merge that did so spent most of its driver
    time converting them."""
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(3)]
    converted: list[str] = []
    convert = captured.convert_exception

    def counted(e: Any) -> Any:
        converted.append(str(e.getClass().getName()))
        return convert(e)

    monkeypatch.setattr(captured, "convert_exception", counted)

    class Remote(HadoopFiles):  # the inputs' footers read as on S3: through Hadoop
        def local_path(self, uri: str) -> str | None:
            return None

    monkeypatch.setattr(index_check, "HadoopFiles", Remote)
    execute_merge(
        spark,
        warehouse,
        make_plan("t", "minor", segments[:2]),
        MergeSettings(driver_max_bytes=driver_max_bytes),
    )
    assert converted == []


def test_merges_leave_no_transaction_id_and_a_checkpoint_agrees_with_the_checksums(
    spark: Any, warehouse: Path
) -> None:
    """A table merged again and again: its live SetTransactions stay at none, and the checkpoint
    delta-rs writes at the table's interval validates the checksums the merges left."""
    # interval 10, not delta-rs's default 100: delta-rs checkpoints a commit of its own that ends
    # an interval (versions 9 and 19, loads), and the merges leave theirs to the job's maintainer
    interval = 10
    current = rust_load(warehouse, "s0", 0, rows=2, configuration={"delta.checkpointInterval": str(interval)})
    log = DeltaLogReader(HadoopFiles(spark), table_uri(warehouse, "t"), "t")
    live = LiveFileIndex(log, log.files)
    merges = interval  # 21 versions: past the interval twice
    for i in range(1, merges + 1):
        new = rust_load(warehouse, f"s{i}", i, rows=2)
        plan = make_plan("t", "minor", [current, new])
        commit = execute_merge(spark, warehouse, plan, live=live)
        current = commit.outputs[0]
    state = snapshot(spark, warehouse)
    assert state.setTransactions().size() == 0
    assert int(state.version()) == 2 * merges
    last = json.loads((warehouse / "t" / "_delta_log" / "_last_checkpoint").read_text())
    assert last["version"] == 2 * merges - 1, "delta-rs checkpointed its last load"
    assert int(state.logSegment().checkpointProvider().version()) == last["version"], "read from it"
    assert bool(state.validateChecksum(spark._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({})))
    assert spark.read.format("delta").load(table_uri(warehouse, "t")).count() == 2 * (merges + 1)


def test_per_plan_ids_of_an_older_job_expire_and_stop_growing(spark: Any, warehouse: Path) -> None:
    """A table merged by a job that still wrote a SetTransaction per plan: the first direct
    merge sets the table's retention for them, and the checkpoint after it drops the old ones."""
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(3)]
    path = table_uri(warehouse, "t")
    jvm = spark._jvm
    old = int((datetime.now(UTC) - timedelta(days=40)).timestamp() * 1000)
    txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
    legacy = [
        jvm.org.apache.spark.sql.delta.actions.SetTransaction(
            f"compactor-plan-old{i}", 1, jvm.scala.Option.apply(jvm.java.lang.Long.valueOf(old))
        )
        for i in range(5)
    ]
    values = jvm.java.util.ArrayList()
    for action in legacy:
        values.add(action)
    none = jvm.scala.Option.empty()
    operation = jvm.org.apache.spark.sql.delta.DeltaOperations.Write(
        jvm.org.apache.spark.sql.SaveMode.Append, none, none, none, none, none, none, none, none
    )
    txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(values).toSeq(), operation)
    assert snapshot(spark, warehouse).setTransactions().size() == 5

    store = SparkTableStore(spark, warehouse)
    settings = load_config({"tables": {"t": {"rules": [{"rule": "minor"}]}}}).for_table("t")
    store.commit(make_plan("t", "minor", segments[:2]), settings)

    config = snapshot(spark, warehouse).metadata().configuration()
    assert str(config.get("delta.setTransactionRetentionDuration").get()) == "interval 30 days"
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    delta_log.checkpoint()
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert snapshot(spark, warehouse).setTransactions().size() == 0, "expired at the checkpoint"


def test_a_concurrent_delete_of_an_input_fails_the_commit_and_nothing_is_removed_twice(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(3)]
    path = table_uri(warehouse, "t")
    before_each_commit(  # the delete rewrites s1's file
        monkeypatch, lambda txn: DeltaTable.forPath(spark, path).delete("segment_id = 's1' AND k % 2 = 0")
    )
    with pytest.raises(CommitConflict, match="ConcurrentDeleteRead"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments[:2]))
    monkeypatch.undo()
    table = spark.read.format("delta").load(path)
    assert sorted(r.segment_id for r in table.select("segment_id").distinct().collect()) == ["s0", "s1", "s2"]
    assert table.count() == 50, "the delete stands; the merge committed nothing"


def test_another_engines_optimize_of_an_input_fails_the_commit(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(2)]
    rust_load(warehouse, "s1", 1)  # a second file in s1: OPTIMIZE has something to compact
    segments[1] = Segment("s1", "t", segments[1].range, segments[1].loaded_at, records=40)
    path = table_uri(warehouse, "t")
    before_each_commit(
        monkeypatch,
        lambda txn: DeltaTable.forPath(spark, path).optimize().where("segment_id = 's1'").executeCompaction(),
    )
    with pytest.raises(CommitConflict, match="Concurrent"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments))
    monkeypatch.undo()
    assert spark.read.format("delta").load(path).count() == 60


@pytest.mark.parametrize("driver_max_bytes", [0, 16 << 20], ids=["spark", "driver"])
def test_a_load_landing_during_a_merge_costs_a_restart_not_a_state_rebuild(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch, driver_max_bytes: int
) -> None:
    """delta-rs commits a load between the merge's read and its commit, with no checksum: the
    merge commits right above it from a fresh transaction, and Delta rebuilds no state."""
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(3)]
    raced: list[int] = []

    def a_load(txn: DirectTransaction) -> None:
        if not raced:  # once: the restart's commit is not raced again
            rust_load(warehouse, "s9", 9)
            raced.append(txn.read_version)

    before_each_commit(monkeypatch, a_load)
    plan = make_plan("t", "minor", segments[:2])
    work = SparkWork(spark)
    done = merge_in_group(spark, warehouse, plan, MergeSettings(driver_max_bytes=driver_max_bytes))
    summary = work.summary(1)
    monkeypatch.undo()

    assert done.version == raced[0] + 2, "the load took the version the merge read for"
    info = next(a["commitInfo"] for a in commit_actions(warehouse, done.version) if "commitInfo" in a)
    assert info["readVersion"] == done.version - 1, "committed from a transaction at the load"
    assert summary["state_rebuilds"] == 0, summary
    assert summary["merge_jobs"] == (1 if driver_max_bytes == 0 else 0), summary
    assert (warehouse / "t" / "_delta_log" / f"{done.version - 1:020d}.crc").exists()
    assert (warehouse / "t" / "_delta_log" / f"{done.version:020d}.crc").exists()
    assert bool(
        snapshot(spark, warehouse).validateChecksum(
            spark._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({})
        )
    )
    table = spark.read.format("delta").load(table_uri(warehouse, "t"))
    counts = {r.segment_id: r["count"] for r in table.groupBy("segment_id").count().collect()}
    assert counts == {plan.output.id: 40, "s2": 20, "s9": 20}
    operation = info["operationMetrics"]
    assert (operation["numOutputRows"], operation["numFiles"]) == ("40", "1"), operation


def test_a_schema_change_during_a_merge_fails_its_restart_and_commits_nothing(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(2)]
    path = table_uri(warehouse, "t")
    before_each_commit(
        monkeypatch, lambda txn: spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (note STRING)")
    )
    version = int(snapshot(spark, warehouse).version())
    with pytest.raises(CommitConflict, match="MetadataChanged"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments))
    monkeypatch.undo()
    assert int(snapshot(spark, warehouse).version()) == version + 1, "only the schema change"


def test_an_input_gone_before_the_merge_began_is_caught_before_any_commit(
    spark: Any, warehouse: Path
) -> None:
    """The catalog lags the table: someone deleted a whole input since. The plan is stale and
    the table gets no commit; a replay of a plan that did commit returns its commit instead."""
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(3)]
    path = table_uri(warehouse, "t")
    DeltaTable.forPath(spark, path).delete("segment_id = 's1'")
    version = int(snapshot(spark, warehouse).version())
    with pytest.raises(StalePlan, match=r"\['s1'\]"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments[:2]))
    assert int(snapshot(spark, warehouse).version()) == version

    plan = make_plan("t", "minor", [segments[0], segments[2]])
    first = execute_merge(spark, warehouse, plan)
    again = execute_merge(spark, warehouse, plan)
    assert again.already_done and (again.version, again.records_out) == (first.version, 40)
    assert int(snapshot(spark, warehouse).version()) == first.version


def test_deleted_rows_stay_deleted_through_a_merge(spark: Any, warehouse: Path) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(2)]
    path = table_uri(warehouse, "t")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    DeltaTable.forPath(spark, path).delete("segment_id = 's0' AND k < 5")  # a deletion vector
    assert any("deletionVector" in a.get("add", {}) for a in commit_actions(warehouse, 3))
    expected = rows_checksum(spark.read.format("delta").load(path))
    plan = make_plan(
        "t", "minor", [Segment("s0", "t", segments[0].range, segments[0].loaded_at, 15), segments[1]]
    )

    commit = execute_merge(spark, warehouse, plan)

    assert commit.records_out == 35
    assert rows_checksum(spark.read.format("delta").load(path)) == expected
    removed = [a["remove"] for a in commit_actions(warehouse, commit.version) if "remove" in a]
    assert sum(1 for r in removed if r.get("deletionVector")) == 1, "the file is removed with its vector"


def test_a_column_mapped_table_merges_directly(spark: Any, warehouse: Path) -> None:
    segments = [rust_load(warehouse, f"s{i}", i) for i in range(2)]
    path = table_uri(warehouse, "t")
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN v TO value")
    expected = rows_checksum(spark.read.format("delta").load(path))

    commit = execute_merge(spark, warehouse, make_plan("t", "minor", segments))

    table = spark.read.format("delta").load(path)
    assert rows_checksum(table) == expected and commit.records_out == 40
    assert [r.segment_id for r in table.select("segment_id").distinct().collect()] == [commit.outputs[0].id]
    assert SparkTableStore(spark, warehouse).commit_path("t") == "direct"


def test_a_table_the_direct_commit_does_not_serve_yet_overwrites_as_before_and_says_so(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only such feature left, collations, no delta-spark 4.x writes: type widening stands in
    for it here. (Not in the `warehouse` fixture: delta-rs reads no type-widening table.)"""
    monkeypatch.setattr(features, "NOT_YET_DIRECT", frozenset({"typeWidening"}))
    warehouse = tmp_path / "wh"
    segments = [rust_load(warehouse, f"s{i}", i, table="widened") for i in range(4)]
    path = table_uri(warehouse, "widened")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    expected = rows_checksum(spark.read.format("delta").load(path))
    store = SparkTableStore(spark, warehouse)
    assert store.commit_path("widened") == (
        "Delta's generic overwrite (table feature(s) typeWidening: not yet on the direct commit path)"
    )
    settings = load_config({"tables": {"widened": {"rules": [{"rule": "minor"}]}}}).for_table("widened")

    with caplog.at_level(logging.INFO, logger="compactor.delta.commit.transaction"):
        commit = store.commit(make_plan("widened", "minor", segments[:2]), settings)
        store.commit(make_plan("widened", "minor", segments[2:]), settings)

    named = [r for r in caplog.records if "generic overwrite" in r.getMessage()]
    assert len(named) == 1 and "typeWidening" in named[0].getMessage(), "named once"
    actions = commit_actions(warehouse, commit.version, "widened")
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert "exact_sizes" not in json.loads(info["userMetadata"]), "written by the generic overwrite"
    assert not [a for a in actions if "txn" in a], "and with no per-plan transaction id either"
    table = spark.read.format("delta").load(path)
    assert rows_checksum(table) == expected and commit.records_out == 40


@pytest.mark.parametrize(("appended_to", "conflicts"), [("s0", True), ("s9", False)])
def test_a_data_changing_commit_conflicts_with_an_append_its_read_predicate_matches(
    spark: Any, warehouse: Path, appended_to: str, conflicts: bool
) -> None:
    """What `track` tells Delta's conflict checker: the files read and the partition predicate
    they were read by, so a load into a read segment fails a commit that changes data (an upsert
    compaction's) and a load elsewhere does not."""
    from compactor.delta.commit.transaction import segment_predicate
    from compactor.delta.log.live_files import table_live_files

    rust_load(warehouse, "s0", 0)
    rust_load(warehouse, "s1", 1)
    path = table_uri(warehouse, "t")
    live = table_live_files(spark, path, "t")
    txn = DirectTransaction.begin(spark, path, live)
    read = live.at(txn.read_version).of(["s0"])["s0"]
    txn.track(read, segment_predicate(["s0"]))
    rust_load(warehouse, appended_to, 9)  # another writer's load, committed meanwhile

    def commit() -> int:
        return txn.commit([], read, True, commit_metadata("merge", []), ["s0"])

    if conflicts:
        with pytest.raises(CommitConflict, match="ConcurrentAppend"):
            commit()
    else:
        assert commit() == 3

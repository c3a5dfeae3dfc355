"""The loaders' Delta transaction ids expire: a table's checkpoint holds a retention's worth of
them, not one per load ever (DESIGN 17), and a retry within the retention still writes nothing.
On real Kafka, Spark, Delta and delta-rs."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from compactor.client import arrow_loader
from compactor.client.arrow_loader import TXN_PREFIX, ArrowLoader
from compactor.client.spark_loader import SparkLoader
from compactor.delta.paths import table_uri
from compactor.delta.table_ops.properties import (
    LOADER_TXN_RETENTION,
    TXN_RETENTION_DEFAULT,
    TXN_RETENTION_PROPERTY,
)
from compactor.delta.table_ops.writes import write_segment
from compactor.domain.segments import Segment, TimeRange
from tests.helpers.streaming import make_kafka

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)
AGED = timedelta(days=8)  # older than the loaders' retention (7 days)


def _rows(n: int) -> pa.Table:
    return pa.table({"k": pa.array([n * 10 + i for i in range(3)], pa.int64())})


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def checkpoint_txns(spark: Any, path: str) -> dict[str, int | None]:
    """Checkpoint the table with delta-spark (as a merge's commit does every ten versions) and
    return the transaction ids the checkpoint holds: app id -> lastUpdated."""
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).checkpoint()
    log = Path(path.removeprefix("file:")) / "_delta_log"
    version = json.loads((log / "_last_checkpoint").read_text())["version"]
    rows = pq.read_table(log / f"{version:020d}.checkpoint.parquet", columns=["txn"]).column("txn")
    return {t["appId"]: t["lastUpdated"] for t in rows.to_pylist() if t}


def test_delta_rs_loads_leave_a_retentions_worth_of_transaction_ids_in_a_checkpoint(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    clock = [_ms(datetime.now(UTC) - AGED)]  # the loads' commit times, as their ids record them
    monkeypatch.setattr(arrow_loader, "_now_ms", lambda: clock[0])
    with ArrowLoader(warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:

        def load(n: int, segment_id: str | None = None) -> Segment:
            start = JAN + timedelta(hours=n)
            return loader.load("readings", _rows(n), start, start + timedelta(hours=1), segment_id=segment_id)

        aged = [load(n) for n in range(12)]
        clock[0] = _ms(datetime.now(UTC))
        recent = [load(n) for n in range(12, 15)]
        path = table_uri(warehouse, "readings")
        version = DeltaTable(path).version()
        again = load(14, segment_id=recent[-1].id)  # a retry within the retention
        assert again == recent[-1] and DeltaTable(path).version() == version, "it wrote nothing"

    table = DeltaTable(path)
    assert table.metadata().configuration[TXN_RETENTION_PROPERTY] == LOADER_TXN_RETENTION
    txns = checkpoint_txns(spark, path)
    assert set(txns) == {TXN_PREFIX + s.id for s in recent}, "the aged loads' ids expired"
    assert all(when is not None and when >= clock[0] for when in txns.values())
    assert spark.read.format("delta").load(path).count() == 3 * (len(aged) + len(recent))
    assert DeltaTable(path).transaction_version(TXN_PREFIX + aged[0].id) is None
    assert DeltaTable(path).transaction_version(TXN_PREFIX + recent[0].id) == 0


def test_a_table_found_without_a_retention_gets_the_loaders_and_a_users_own_is_kept(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    for name, configuration in (("older", None), ("users", {TXN_RETENTION_PROPERTY: "interval 30 days"})):
        write_deltalake(  # a table an earlier loader made: its ids carry no time
            table_uri(warehouse, name),
            _rows(0).append_column("segment_id", pa.array(["s0"] * 3)),
            partition_by=["segment_id"],
            configuration=configuration,
            commit_properties=CommitProperties(app_transactions=[Transaction(TXN_PREFIX + "s0", 0)]),
        )
    with ArrowLoader(warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
        for name in ("older", "users"):
            for n in (1, 2):
                loader.load(name, _rows(n), JAN + timedelta(hours=n), JAN + timedelta(hours=n + 1))
    older, users = (DeltaTable(table_uri(warehouse, name)) for name in ("older", "users"))
    assert older.metadata().configuration[TXN_RETENTION_PROPERTY] == LOADER_TXN_RETENTION
    assert older.version() == 3, "set once: one metadata commit, then the two loads"
    assert users.metadata().configuration[TXN_RETENTION_PROPERTY] == "interval 30 days"
    assert users.version() == 2
    txns = checkpoint_txns(spark, table_uri(warehouse, "older"))
    assert TXN_PREFIX + "s0" not in txns and len(txns) == 2, "an id without a time expires at once"


def test_a_table_a_spark_load_creates_lets_idempotent_writers_ids_expire(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path
) -> None:
    """`SparkLoader` loads carry no transaction id; a `StreamingSink` query's appends carry one
    per query: those of queries idle for longer than the retention leave at the checkpoint."""
    kafka = make_kafka(kafka_bootstrap, unique)
    rows = spark.createDataFrame([(JAN, 1)], "ts timestamp, k bigint")
    with SparkLoader(spark, warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
        for n in range(3):
            loader.load("clicks", rows, JAN + timedelta(hours=n), JAN + timedelta(hours=n + 1))
    path = table_uri(warehouse, "clicks")
    assert DeltaTable(path).metadata().configuration[TXN_RETENTION_PROPERTY] == LOADER_TXN_RETENTION
    assert checkpoint_txns(spark, path) == {}, "plain loads leave no id"

    jvm = spark._jvm
    aged = jvm.scala.Option.apply(jvm.java.lang.Long.valueOf(_ms(datetime.now(UTC) - AGED)))
    txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
    values = jvm.java.util.ArrayList()
    for n in range(5):  # queries that wrote last more than the retention ago
        values.add(jvm.org.apache.spark.sql.delta.actions.SetTransaction(f"compactor-sink-old{n}", 7, aged))
    none = jvm.scala.Option.empty()
    operation = jvm.org.apache.spark.sql.delta.DeltaOperations.Write(
        jvm.org.apache.spark.sql.SaveMode.Append, none, none, none, none, none, none, none, none
    )
    txn.commit(jvm.scala.jdk.javaapi.CollectionConverters.asScala(values).toSeq(), operation)
    for n in range(2):  # as StreamingSink appends a batch
        start = JAN + timedelta(days=1, hours=n)
        segment = Segment(f"b{n}", "clicks", TimeRange(start, start + timedelta(hours=1)), start)
        write_segment(spark, warehouse, segment, rows, (f"compactor-sink-q{n}", 0))
    assert set(checkpoint_txns(spark, path)) == {"compactor-sink-q0", "compactor-sink-q1"}


def test_a_sessions_default_retention_for_new_tables_wins_over_the_loaders(
    spark: Any, warehouse: Path
) -> None:
    rows = spark.createDataFrame([(JAN, 1)], "ts timestamp, k bigint")
    spark.conf.set(TXN_RETENTION_DEFAULT, "interval 2 days")
    try:
        segment = Segment("s0", "views", TimeRange(JAN, JAN + timedelta(hours=1)), JAN)
        write_segment(spark, warehouse, segment, rows)
    finally:
        spark.conf.unset(TXN_RETENTION_DEFAULT)
    configuration = DeltaTable(table_uri(warehouse, "views")).metadata().configuration
    assert configuration[TXN_RETENTION_PROPERTY] == "interval 2 days"

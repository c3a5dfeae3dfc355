"""Every Delta table kind users turn on today, compacted exactly by one job over one warehouse, on
real Kafka, Spark and Delta (issue 50's matrix).

Each table is created by delta-spark with one feature on (or by delta-rs with its defaults) and
loaded for a day in three 8-hour segments; one job merges every table's day. Per table: the day is
one segment, the rows and an order-independent checksum equal what was loaded, the protocol's
features and the table's properties are unchanged; the row-tracking table's rows keep their row
ids and commit versions, the identity table's rows keep their values and a load after the merge
gets fresh ones. A liquid-clustered table is refused with why (see test_clustered_tables).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from compactor.client.arrow_loader import ArrowLoader
from compactor.client.loader import load_segment, sample_rows
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.domain.certificate import Certificate
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from tests.helpers.streaming import JobRunner, checksum, make_kafka

pytestmark = pytest.mark.integration

MONDAY = datetime(2024, 1, 1, tzinfo=UTC)
LOADS, SPAN = 3, timedelta(hours=8)  # a day in three loads: one merge per table, its inputs from 3 commits
COLUMNS = "event_time TIMESTAMP, customer_id INT, amount DECIMAL(10,2), segment_id STRING"
KINDS: dict[str, dict[str, str]] = {
    "plain": {},
    "deletion_vectors": {"delta.enableDeletionVectors": "true"},
    "column_mapping": {"delta.columnMapping.mode": "name"},
    "change_feed": {"delta.enableChangeDataFeed": "true"},
    "commit_timestamps": {"delta.enableInCommitTimestamps": "true"},
    "v2_checkpoints": {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "3"},
    "row_tracking": {"delta.enableRowTracking": "true"},
    "type_widening": {"delta.enableTypeWidening": "true"},
    "iceberg_compat": {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true"},
}
IDENTITY = "identity"
RUST = "delta_rs"


def create(spark: Any, warehouse: Path, table: str, properties: dict[str, str]) -> str:
    path = table_uri(warehouse, table)
    columns = ("id BIGINT GENERATED ALWAYS AS IDENTITY, " if table == IDENTITY else "") + COLUMNS
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(
        f"CREATE TABLE delta.`{path}` ({columns}) USING delta PARTITIONED BY (segment_id)"
        + (f" TBLPROPERTIES ({settings})" if settings else "")
    )
    return path


def shape(spark: Any, path: str) -> tuple[Any, dict[str, str]]:
    """The table's protocol (its features) and properties, as Delta describes them."""
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    features = sorted(detail.tableFeatures or [])
    return (detail.minReaderVersion, detail.minWriterVersion, features), dict(detail.properties)


def identity_mark(spark: Any, path: str) -> str | None:
    log = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert log is not None
    schema = json.loads(spark.read.format("delta").load(path).schema.json())
    field = next(f for f in schema["fields"] if f["name"] == "id")
    return field["metadata"].get("delta.identity.highWaterMark")


def row_ids(spark: Any, path: str) -> dict[tuple[Any, ...], tuple[int, int]]:
    rows = (
        spark.read.format("delta")
        .load(path)
        .select("event_time", "customer_id", "amount", "_metadata.row_id", "_metadata.row_commit_version")
    )
    return {(r.event_time, r.customer_id, r.amount): (r.row_id, r.row_commit_version) for r in rows.collect()}


def certificate(spark: Any, path: str) -> Certificate:
    """The content certificate of the table's latest commit (its merge), which must hold."""
    latest = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert latest is not None
    found = Certificate.from_dict(json.loads(latest.userMetadata)["certificate"])
    assert found.holds
    return found


def test_one_job_compacts_every_table_kind_exactly(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    tables = {**KINDS, IDENTITY: {}}
    paths = {table: create(spark, warehouse, table, properties) for table, properties in tables.items()}
    producer = EventProducer(kafka)
    for load in range(LOADS):
        start = MONDAY + load * SPAN
        for table in tables:
            rows = sample_rows(spark, start, start + SPAN, 10, seed=load)
            load_segment(
                spark, warehouse, kafka, producer, table, rows, start, start + SPAN, segment_id=f"h{load}"
            )
        if load == 1:  # mid-day: another writer deletes rows of the loads so far (deletion vectors)
            spark.sql(f"DELETE FROM delta.`{paths['deletion_vectors']}` WHERE customer_id % 3 = 0")
    producer.close()
    # the v2-checkpoint table's last load checkpointed it (interval 3): the merge reads that
    v2_log = warehouse / "v2_checkpoints" / "_delta_log"
    assert [f.name for f in v2_log.glob(f"{LOADS:020d}.checkpoint.*.*")], "a v2 checkpoint (uuid-named)"
    # the day's files hold ints; the table's column is widened to a long under them
    spark.sql(f"ALTER TABLE delta.`{paths['type_widening']}` ALTER COLUMN customer_id TYPE BIGINT")
    with ArrowLoader(str(warehouse), kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
        for load in range(LOADS):  # delta-rs with its defaults: protocol 1/2, no checkpoints of its own
            start = MONDAY + load * SPAN
            times = pa.array([start + h * SPAN / 10 for h in range(10)], pa.timestamp("us", tz="UTC"))
            data = pa.table({"event_time": times, "customer_id": pa.array(range(10), pa.int32())})
            loader.load(RUST, data, start, start + SPAN, segment_id=f"h{load}")
    paths[RUST] = table_uri(warehouse, RUST)

    before = {t: checksum(spark.read.format("delta").load(p)) for t, p in paths.items()}
    shapes = {t: shape(spark, p) for t, p in paths.items()}
    ids_before = row_ids(spark, paths["row_tracking"])
    identities = sorted(r.id for r in spark.read.format("delta").load(paths[IDENTITY]).collect())
    mark = identity_mark(spark, paths[IDENTITY])

    config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["day"]}]}})
    handler = build_handler(spark, config, warehouse, kafka)
    JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()

    for table, path in paths.items():
        segments = handler.catalog.segments(table)
        assert [(s.range.start, s.range.end) for s in segments] == [(MONDAY, MONDAY + LOADS * SPAN)], (
            f"{table}: the day merged"
        )
        assert checksum(spark.read.format("delta").load(path)) == before[table], f"{table}: rows exact"
        assert shape(spark, path) == shapes[table], f"{table}: features and properties unchanged"
        assert certificate(spark, path).output.rows == before[table][0], f"{table}: merged certified"
    assert handler.stats.failed_merges == 0 and handler.catalog.quarantined("plain") is None
    assert row_ids(spark, paths["row_tracking"]) == ids_before, "every row keeps its id and version"
    after = sorted(r.id for r in spark.read.format("delta").load(paths[IDENTITY]).collect())
    assert after == identities and identity_mark(spark, paths[IDENTITY]) == mark
    spark.createDataFrame(
        [(MONDAY + timedelta(days=8), 1, Decimal("1.00"), "late")],
        "event_time TIMESTAMP, customer_id INT, amount DECIMAL(10,2), segment_id STRING",
    ).write.format("delta").mode("append").save(paths[IDENTITY])
    fresh = spark.read.format("delta").load(paths[IDENTITY]).where("segment_id = 'late'").first()
    assert fresh is not None and fresh.id > max(identities), "a load after the merge gets a fresh value"

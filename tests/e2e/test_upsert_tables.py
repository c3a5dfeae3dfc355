"""Upsert tables as Pinot users would use them, on real Kafka, Spark and Delta:
producers writing with their own Spark writer (no load-time column), small clean segments merged
M:1 with the latest-row view unchanged row for row, and a SQL view that gives readers who never
import this package exactly what `latest_rows` gives, before and after compaction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.cli.main import main
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.upsert import latest_rows
from compactor.domain.clock import now_utc
from compactor.domain.events import CompactionRequested, SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from tests.helpers.streaming import JobRunner, consume_all, make_kafka

pytestmark = pytest.mark.integration

TABLE = "accounts"
TABLE_CONFIG = {
    "upsert": {"primary_key": ["account"], "comparison_column": "version"},
    "rules": [{"rule": "upsert_compaction", "trigger": "manual", "max_records_per_segment": 100}],
}
CONFIG = load_config({"tables": {TABLE: TABLE_CONFIG}})
START = datetime(2024, 6, 1, tzinfo=UTC)
LOADS = 12


def rows(spark: Any, load: int) -> Any:
    """Eight rows per load. Loads 0-5 write accounts 0-47 once each; loads 6-11 update accounts
    0-47 again with version 1, except that load 11 repeats load 10's versions for accounts 40-47:
    a tie, which the later load wins."""
    base = (load % 6) * 8
    version = 0 if load < 6 else 1
    return spark.range(8).select(
        (F.col("id") + base).cast("int").alias("account"),
        F.lit(version).alias("version"),
        F.concat(F.lit(f"l{load}-"), F.col("id").cast("string")).alias("balance"),
    )


def expected(spark: Any) -> list[tuple[int, int, str]]:
    latest: dict[int, tuple[int, str]] = {}
    for load in range(LOADS):
        for r in rows(spark, load).collect():
            if r.account not in latest or r.version >= latest[r.account][0]:  # ties: the later load wins
                latest[r.account] = (r.version, r.balance)
    return sorted((a, v, b) for a, (v, b) in latest.items())


def own_writer_load(spark: Any, warehouse: Path, kafka: Any, producer: EventProducer, load: int) -> None:
    """As a producer with its own Spark writer loads: one Delta append, then the event."""
    sid = f"own-{load:02d}"
    data = rows(spark, load).withColumn("segment_id", F.lit(sid))
    data.write.format("delta").mode("append").partitionBy("segment_id").save(table_uri(warehouse, TABLE))
    start = START + timedelta(hours=load)
    segment = Segment(
        sid, TABLE, TimeRange(start, start + timedelta(hours=1)), now_utc(), records=8, bytes=4000
    )
    codec = default_codec()
    producer.send_all(
        [
            (
                kafka.segments_topic,
                TABLE,
                codec.encode_segment_completed(SegmentCompleted(segment, now_utc())),
                None,
            )
        ]
    )


def view_rows(spark: Any, statement: str) -> list[tuple[int, int, str]]:
    spark.sql(statement.rstrip().rstrip(";"))
    return sorted((r.account, r.version, r.balance) for r in spark.table(f"{TABLE}_latest").collect())


def latest(spark: Any, warehouse: Path, upsert: Any) -> list[tuple[int, int, str]]:
    view = latest_rows(spark, warehouse, TABLE, upsert).select("account", "version", "balance")
    return sorted(tuple(r) for r in view.collect())


def test_own_writers_small_segments_and_the_sql_view(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    for load in range(LOADS):
        own_writer_load(spark, warehouse, kafka, producer, load)
    handler = build_handler(spark, CONFIG, warehouse, kafka, producer=producer)
    job = JobRunner(spark, handler, kafka, tmp_path / "cp")
    job.run_until_quiet()  # the segments are catalogued; the rule is manual, so nothing merges yet
    assert len(handler.catalog.segments(TABLE)) == LOADS

    config = tmp_path / "tables.yaml"
    config.write_text(f"tables:\n  {TABLE}: {TABLE_CONFIG}\n".replace("'", '"'))
    printed = CliRunner().invoke(main, ["upsert", "view", "--table", TABLE, "--config", str(config),
                                        "--warehouse", str(warehouse)])  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert printed.output.startswith(f"CREATE OR REPLACE VIEW {TABLE}_latest AS")
    upsert = CONFIG.for_table(TABLE).upsert
    assert upsert is not None
    before = view_rows(spark, printed.output)
    assert before == expected(spark) == latest(spark, warehouse, upsert)

    request = CompactionRequested(uuid.uuid4().hex, TABLE, now_utc(), "upsert_compaction")
    producer.send_all(
        [(kafka.segments_topic, TABLE, default_codec().encode_compaction_requested(request), None)]
    )
    job.run_until_quiet()

    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert [len(r["inputs"]) for r in results] == [LOADS], "twelve small segments, one M:1 merge"
    (result,) = results
    assert result["invalid_rows_removed"] == LOADS * 8 - 48 and result["records_out"] == 48
    assert result["data_change"] is True, "superseded rows were dropped"
    # the merge's winners were checked against the job's key index before its commit
    history = DeltaTable.forPath(spark, table_uri(warehouse, TABLE)).history()
    (meta,) = history.where(F.col("version") == result["table_version"]).select("userMetadata").collect()
    winners = json.loads(meta["userMetadata"])["certificate"]["winners"]
    assert winners["index"] == winners["kept"] and winners["kept"]["rows"] == 48
    after = view_rows(spark, printed.output)  # the same view, over the compacted table
    assert after == before, "the latest-row view is unchanged, row for row"
    assert latest(spark, warehouse, upsert) == before
    assert spark.read.format("delta").load(table_uri(warehouse, TABLE)).count() == 48

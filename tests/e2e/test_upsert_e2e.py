"""Upsert compaction end to end, with a concurrent upserting loader and readers (Pinot's upsert compaction)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from compactor.client.loader import load_segment
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.rewrite.upsert import invalid_counts, latest_rows
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.stream import merge_desk
from tests.helpers.streaming import JobRunner, consume_all, make_kafka

pytestmark = pytest.mark.integration

TABLE = "profiles"
CONFIG = load_config(
    {
        "tables": {
            TABLE: {
                "upsert": {"primary_key": ["user_id"], "comparison_column": "version"},
                "rules": [{"rule": "upsert_compaction", "max_records_per_segment": 40}],
            }
        }
    }
)
KEYS = 30
LOADS = 8


def batch(spark: Any, load: int) -> Any:
    """Load n updates keys (7 * i + 3 * n) % KEYS for i < 12; versions go up by load, except load 5,
    which repeats load 4's versions (a tie: the later load must win)."""
    version = 4 if load == 5 else load
    return spark.range(12).select(
        ((F.col("id") * 7 + load * 3) % KEYS).cast("int").alias("user_id"),
        F.lit(version).alias("version"),
        F.concat(F.lit(f"v{load}-"), F.col("id").cast("string")).alias("value"),
    )


def expected(spark: Any) -> dict[int, tuple[int, str]]:
    latest: dict[int, tuple[int, str]] = {}
    for load in range(LOADS):
        for row in batch(spark, load).collect():
            current = latest.get(row.user_id)
            if current is None or row.version >= current[0]:  # ties: the later load wins
                latest[row.user_id] = (row.version, row.value)
    return latest


def test_upsert_compaction_with_a_concurrent_loader(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    handler = build_handler(spark, CONFIG, warehouse, kafka, producer=producer, codec=default_codec())
    job = JobRunner(spark, handler, kafka, tmp_path / "cp")
    upsert = CONFIG.for_table(TABLE).upsert
    assert upsert is not None
    start = datetime(2024, 3, 1, tzinfo=UTC)

    def load(i: int) -> None:
        load_segment(
            spark, warehouse, kafka, producer, TABLE, batch(spark, i), start + timedelta(hours=i),
            start + timedelta(hours=i + 1), segment_id=f"u{i}",
        )  # fmt: skip

    load(0)
    load(1)
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        seen: set[int] = set()
        while not stop.is_set():
            view = latest_rows(spark, warehouse, TABLE, upsert)
            keys = [r.user_id for r in view.select("user_id").collect()]
            if len(keys) != len(set(keys)):
                problems.append(f"a key appeared twice: {len(keys)} rows, {len(set(keys))} keys")
            if not seen <= set(keys):
                problems.append(f"keys went missing: {sorted(seen - set(keys))}")
            seen |= set(keys)

    def loader() -> None:
        for i in range(2, LOADS):
            load(i)

    threads = [threading.Thread(target=reader), threading.Thread(target=loader)]
    for t in threads:
        t.start()
    while threads[1].is_alive():
        job.run_once()
    threads[1].join()
    job.run_until_quiet()
    stop.set()
    threads[0].join()

    assert problems == []
    view = {r.user_id: (r.version, r.value) for r in latest_rows(spark, warehouse, TABLE, upsert).collect()}
    assert view == expected(spark)
    load_order = merge_desk.load_order(handler.catalog, TABLE)
    assert invalid_counts(spark, warehouse, TABLE, upsert, load_order) == {}, "no superseded row is left"
    keys = handler.planner.keys
    assert keys.invalid_counts(TABLE, upsert) == {} and keys.rebuilds == 1, "read whole once, then followed"
    raw = spark.read.format("delta").load(str(warehouse / TABLE)).count()
    assert raw == len(view)
    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert results and all(r["rule"] == "upsert_compaction" for r in results)
    assert sum(r["invalid_rows_removed"] for r in results) == LOADS * 12 - len(view)
    assert all(r["records_out"] <= 40 for r in results), "outputs stay within max_records_per_segment"

"""A Structured Streaming producer loads through `StreamingSink`, on real Kafka, Spark and Delta:
each micro-batch one segment, exactly once, merged by the job while the producer runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from compactor import SparkLoader, StreamingSink, sample_rows
from compactor.client.spark_loader import TIMESTAMP_TYPE
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.job.wiring import build_handler
from compactor.kafka.topics import ensure_topics
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

TABLE = "clicks"
FIRST = datetime(2024, 1, 1, tzinfo=UTC)
SCHEMA = "event_time timestamp, user_id bigint, amount double"
# ten level-0 segments merge into one (CarbonData's minor compaction)
CONFIG = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [10, 0]}]}}


def write_inputs(directory: Path, files: int = 10, rows: int = 10) -> None:
    """One JSON file per micro-batch: `files` hours of `rows` clicks each."""
    directory.mkdir(parents=True)
    for f in range(files):
        hour = FIRST + timedelta(hours=f)
        lines = [
            json.dumps({"event_time": (hour + timedelta(minutes=5 * i)).isoformat(), "user_id": f * 100 + i,
                        "amount": float(i)})
            for i in range(rows)
        ]  # fmt: skip
        (directory / f"part-{f:02d}.json").write_text("\n".join(lines) + "\n")


def produce(spark: Any, inputs: Path, checkpoint: Path, sink: Callable[[Any, int], None]) -> Any:
    """The producer's query: one file per micro-batch, until the files are all read."""
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(inputs))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def announced(kafka_bootstrap: str, topic: str) -> list[str]:
    codec = default_codec()
    return [codec.decode_segment_completed(m.value()).segment.id for m in consume_all(kafka_bootstrap, topic)]


def test_ten_micro_batches_become_ten_segments_merged_while_the_producer_runs(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    write_inputs(tmp_path / "in")
    handler = build_handler(spark, load_config(CONFIG), warehouse, kafka)
    job = JobRunner(spark, handler, kafka, tmp_path / "job")
    with SparkLoader(spark, warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
        sink = StreamingSink(loader, TABLE, time_column="event_time")
        query = produce(spark, tmp_path / "in", tmp_path / "producer", sink)
        producer = threading.Thread(target=query.awaitTermination)
        producer.start()
        while producer.is_alive():
            job.run_once()
        producer.join()
        assert query.exception() is None
    job.run_until_quiet()

    ids = announced(kafka_bootstrap, kafka.segments_topic)
    loads = [i for i in ids if not i.startswith("m-")]
    assert len(loads) == len(set(loads)) == 10, ids
    (merged,) = handler.catalog.segments(TABLE)
    assert (merged.records, merged.level, handler.stats.dead_letters) == (100, 1, 0)
    assert merged.start == FIRST and merged.end == FIRST + timedelta(hours=9, minutes=45, microseconds=1)
    table = spark.read.format("delta").load(table_uri(warehouse, TABLE))
    source = spark.read.schema(SCHEMA).json(str(tmp_path / "in"))
    assert checksum(table) == checksum(source)


def test_a_producer_killed_between_its_commit_and_its_event_loads_each_batch_once(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    write_inputs(tmp_path / "in", files=4)
    with SparkLoader(spark, warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
        sink = StreamingSink(loader, TABLE, time_column="event_time")
        announce = loader.announce

        def killed_after_commit(event: Any) -> None:
            raise RuntimeError("the producer died after its Delta commit")

        def crashing(batch: Any, batch_id: int) -> None:
            loader.announce = killed_after_commit if batch_id == 2 else announce  # type: ignore[method-assign]
            sink(batch, batch_id)

        first = produce(spark, tmp_path / "in", tmp_path / "producer", crashing)
        with pytest.raises(Exception, match="died after its Delta commit"):
            first.awaitTermination()
        loader.announce = announce  # type: ignore[method-assign]
        assert len(announced(kafka_bootstrap, kafka.segments_topic)) == 2, "batches 0 and 1"
        produce(spark, tmp_path / "in", tmp_path / "producer", sink).awaitTermination()  # the restart

    table = spark.read.format("delta").load(table_uri(warehouse, TABLE))
    assert table.count() == 40, "batch 2 was committed once: the replay wrote nothing"
    assert table.select("segment_id").distinct().count() == 4
    ids = announced(kafka_bootstrap, kafka.segments_topic)
    assert len(ids) == len(set(ids)) == 4, "batch 2 announced once, after the restart"
    handler = build_handler(spark, load_config(CONFIG), warehouse, kafka)
    JobRunner(spark, handler, kafka, tmp_path / "job").run_until_quiet()
    assert handler.stats.dead_letters == 0
    assert sorted(s.id for s in handler.catalog.segments(TABLE)) == sorted(ids)


def test_loads_store_micros_timestamps_even_from_a_session_left_at_int96(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    spark.conf.set(TIMESTAMP_TYPE, "INT96")  # Spark's own default
    try:
        with SparkLoader(spark, warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
            loader.load(
                TABLE,
                sample_rows(spark, FIRST, FIRST + timedelta(days=1), 10),
                FIRST,
                FIRST + timedelta(days=1),
            )
    finally:
        spark.conf.set(TIMESTAMP_TYPE, "TIMESTAMP_MICROS")
    files = spark.read.format("delta").load(table_uri(warehouse, TABLE)).inputFiles()
    types = {
        str(pq.ParquetFile(f.removeprefix("file:")).schema_arrow.field("event_time").type) for f in files
    }
    assert types == {"timestamp[us, tz=UTC]"}


def test_an_empty_micro_batch_writes_and_announces_nothing(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    context = spark.sparkContext
    context.setLocalProperty("sql.streaming.queryId", "0f8e2a7c-1111-2222-3333-444455556666")  # as Spark does
    try:
        with SparkLoader(spark, warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
            StreamingSink(loader, TABLE, time_column="event_time")(spark.createDataFrame([], SCHEMA), 7)
    finally:
        context.setLocalProperty("sql.streaming.queryId", None)
    assert not (warehouse / TABLE).exists(), "no table, no commit"
    assert announced(kafka_bootstrap, kafka.segments_topic) == []

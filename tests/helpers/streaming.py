"""Helpers to drive the real streaming job and read real topics in tests."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, TopicPartition
from pyspark.sql import DataFrame, Row, SparkSession

from compactor.dev.rows_checksum import rows_checksum
from compactor.job.query import progress, start_query
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from compactor.stream.handler import BatchHandler


def make_kafka(bootstrap: str, unique: Callable[[str], str], partitions: int | None = None) -> KafkaSettings:
    """Fresh topics; `partitions`: the segments topic's count (shards need several)."""
    kafka = KafkaSettings(
        bootstrap,
        segments_topic=unique("segments"),
        results_topic=unique("results"),
        dead_letter_topic=unique("dead"),
    )
    ensure_topics(kafka, [kafka.segments_topic], partitions=partitions)
    ensure_topics(kafka, [kafka.results_topic, kafka.dead_letter_topic])
    return kafka


def consume_all(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Message]:
    """Every message on `topic` up to its current end (read by offsets, no group rebalance)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        ends: dict[int, int] = {}
        starts = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                ends[p] = high
                starts.append(TopicPartition(topic, p, low))
        consumer.assign(starts)
        messages: list[Message] = []
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            messages.append(msg)
            if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                ends.pop(msg.partition(), None)
        assert not ends, f"timed out reading {topic}"
        return sorted(messages, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


@dataclass
class JobRunner:
    """Runs the real query with availableNow until a run consumes no event."""

    spark: SparkSession
    handler: BatchHandler
    kafka: KafkaSettings
    checkpoint: Path

    def run_once(self) -> int:
        """Events processed and merges recorded by one run and the merges it started."""
        before = progress(self.handler)
        query = start_query(self.spark, self.handler, self.kafka, self.checkpoint, available_now=True)
        query.awaitTermination(300)
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        self.handler.settle()
        after = progress(self.handler)
        return after[0] - before[0] + after[1] - before[1]

    def run_until_quiet(self, max_runs: int = 30) -> int:
        runs = 0
        while self.run_once() > 0:
            runs += 1
            assert runs < max_runs, "the job did not settle"
        return runs


def checksum(df: DataFrame, exclude: tuple[str, ...] = ("segment_id",)) -> tuple[int, int]:
    """(row count, order-independent checksum of the rows without `exclude`)."""
    return rows_checksum(df, exclude)


@dataclass
class DownstreamReader:
    """A Delta streaming reader of a compacted table, run as a downstream team runs one:
    its own checkpoint, `availableNow` runs, every row it sees copied into a sink table."""

    spark: SparkSession
    source: Path
    workdir: Path
    options: dict[str, str] = field(default_factory=dict)

    def run(self) -> None:
        reader = self.spark.readStream.format("delta")
        for key, value in self.options.items():
            reader = reader.option(key, value)
        query = (
            reader.load(str(self.source))
            .writeStream.format("delta")
            .option("checkpointLocation", str(self.workdir / "checkpoint"))
            .trigger(availableNow=True)
            .start(str(self.workdir / "sink"))
        )
        try:
            query.awaitTermination(300)
        except Exception as exc:  # StreamingQueryException: the reader stopped
            raise RuntimeError(f"downstream reader failed: {exc}") from exc
        if query.exception() is not None:
            raise RuntimeError(f"downstream reader failed: {query.exception()}")

    def seen(self) -> DataFrame:
        return self.spark.read.format("delta").load(str(self.workdir / "sink"))


def _comparable(value: Any) -> Any:
    # Spark hands out naive local datetimes, Arrow aware UTC ones: compare instants
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    # a struct is a Row from Spark and a dict from Arrow; a map a dict from Spark and a list of
    # (key, value) pairs from Arrow: both as their sorted (name or key, value) pairs
    if isinstance(value, Row):
        return _comparable(value.asDict())
    if isinstance(value, dict):
        return tuple(sorted((k, _comparable(v)) for k, v in value.items()))
    if isinstance(value, list) and value and all(_pair(v) for v in value):
        return tuple(sorted((k, _comparable(v)) for k, v in value))
    if isinstance(value, list | tuple):  # arrays (multi-value columns)
        return tuple(_comparable(v) for v in value)
    return value


def _pair(value: Any) -> bool:
    """A map entry as Arrow hands it out (a Spark struct, a Row, is a tuple too)."""
    return isinstance(value, tuple) and not isinstance(value, Row) and len(value) == 2


def assert_delta_rs_agrees(spark: SparkSession, path: Path, readable_only: bool = False) -> None:
    """An independent Delta implementation (delta-rs) reads the same version, segment ids
    and rows as Spark: what we commit is plain Delta, not something only Spark understands.
    `readable_only`: a table with a feature delta-rs does not support (type widening, in 1.6)
    is passed over, not failed: there is nothing to compare."""
    import pyarrow as pa
    from deltalake import DeltaTable as RustTable
    from deltalake import QueryBuilder
    from deltalake.exceptions import DeltaError

    try:
        theirs = RustTable(str(path))
        QueryBuilder().register("t", theirs)
    except DeltaError as exc:
        if readable_only and "Unsupported table features" in str(exc):
            return
        raise
    ours = spark.read.format("delta").load(str(path))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert history is not None and theirs.version() == history.version
    columns = sorted(ours.columns)
    arrow = pa.table(QueryBuilder().register("t", theirs).execute("SELECT * FROM t").read_all())
    their_rows = Counter(
        tuple(_comparable(row[c]) for c in columns) for row in arrow.select(columns).to_pylist()
    )
    our_rows = Counter(tuple(_comparable(v) for v in row) for row in ours.select(*columns).collect())
    assert their_rows == our_rows
    assert {r["segment_id"] for r in arrow.select(["segment_id"]).to_pylist()} == {
        r.segment_id for r in ours.select("segment_id").distinct().collect()
    }


def data_change_flags(path: Path, version: int) -> set[bool]:
    """The `dataChange` flags of one commit's adds and removes, read from the Delta log."""
    flags = set()
    with open(path / "_delta_log" / f"{version:020d}.json") as log:
        for line in log:
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    flags.add(bool(action[kind]["dataChange"]))
    return flags

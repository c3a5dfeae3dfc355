"""Loads as a producer outside Spark makes them: segments written by delta-rs with the load record
the job reads, their `SegmentCompleted` events, and the benchmark's own topics. Shared by the
benchmarks that keep loading off the job's CPU (capacity, freshness).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from compactor.codec.events import default_codec
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange

if TYPE_CHECKING:
    from compactor.kafka.settings import KafkaSettings

START = datetime(2024, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def segment_table(
    sids: list[str], starts: list[datetime], rows: int, payload: int = 0, width: timedelta = HOUR
) -> pa.Table:
    """`rows` rows per segment, event times spread over the segment's `width`; `payload` random
    bytes a row make a segment as large as wanted (they do not compress)."""
    n = rows * len(sids)
    rng = np.random.default_rng(len(sids) * 7919 + rows)
    step = int(width.total_seconds()) // max(rows, 1)
    offsets = np.tile(np.arange(rows) * step, len(sids)).astype("int64")
    base = np.repeat(np.array([int(s.timestamp()) for s in starts], dtype="int64"), rows)
    columns: dict[str, Any] = {
        "event_time": pa.array((base + offsets) * 1_000_000, pa.timestamp("us", tz="UTC")),
        "customer_id": pa.array(rng.integers(0, 100_000, n), pa.int32()),
        "amount": pa.array(rng.integers(0, 1_000_000, n) / 100, pa.float64()),
    }
    if payload:
        blob = rng.integers(0, 256, n * payload, dtype=np.uint8).tobytes()
        columns["payload"] = pa.array([blob[i * payload : (i + 1) * payload] for i in range(n)], pa.binary())
    columns["segment_id"] = pa.array(np.repeat(np.array(sids, dtype=object), rows), pa.string())
    return pa.table(columns)


def write_segments(
    path: str, table: str, slots: list[int], rows: int, payload: int = 0, width: timedelta = HOUR
) -> list[Segment]:
    """One delta-rs append holding these segments (partitioned by segment_id), segment `i` covering
    the `i`-th `width` after START, with the load record the job reads in its userMetadata;
    returned with exact records and bytes."""
    sids = [f"{table}-h{h:05d}" for h in slots]
    starts = [START + h * width for h in slots]
    now = datetime.now(UTC)
    segments = [
        Segment(sid, table, TimeRange(s, s + width), now, rows) for sid, s in zip(sids, starts, strict=True)
    ]
    write_deltalake(
        path,
        segment_table(sids, starts, rows, payload, width),
        partition_by=["segment_id"],
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": commit_metadata("load", segments)}
        ),
    )
    wanted = set(sids)
    sizes: dict[str, int] = {}
    for action in pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist():
        sid = action.get("partition.segment_id")
        if sid in wanted:
            sizes[sid] = sizes.get(sid, 0) + int(action["size_bytes"])
    return [Segment(s.id, s.table, s.range, s.loaded_at, rows, bytes=sizes[s.id]) for s in segments]


def completed(segments: list[Segment]) -> list[tuple[str, str, bytes, None]]:
    """Each segment's `SegmentCompleted` event as `EventProducer.send_all` takes it (the topic is
    left as the table's name: callers put theirs in)."""
    codec = default_codec()
    return [
        (s.table, s.table, codec.encode_segment_completed(SegmentCompleted(s, s.loaded_at)), None)
        for s in segments
    ]


def bench_topics(bootstrap: str, prefix: str, shards: int | None = None) -> KafkaSettings:
    """The job's three topics, named after `prefix` and created; with `shards`, the segments
    topic alone, with a partition per shard (the jobs create the others)."""
    from compactor.kafka.settings import KafkaSettings
    from compactor.kafka.topics import ensure_topics

    kafka = KafkaSettings(
        bootstrap,
        segments_topic=f"{prefix}-segments",
        results_topic=f"{prefix}-results",
        dead_letter_topic=f"{prefix}-dead",
    )
    if shards is not None:
        ensure_topics(kafka, [kafka.segments_topic], partitions=shards)
    else:
        ensure_topics(kafka, [kafka.segments_topic, kafka.results_topic, kafka.dead_letter_topic])
    return kafka

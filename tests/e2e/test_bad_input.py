"""A mixed stream of 1,200 events, a third of them bad in every way: the job never stops,
every bad event reaches the dead-letter topic once with its reason, every good one counts."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from compactor.client.loader import sample_rows
from compactor.codec.events import SEGMENT_COMPLETED, default_codec
from compactor.codec.framing import MAGIC
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.job.wiring import build_handler
from compactor.kafka.messages import DEAD_LETTER_REASON_HEADER
from compactor.kafka.producer import EventProducer
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

TABLE = "metrics"
GOOD = 800
FIRST = datetime(2020, 1, 1, tzinfo=UTC)


def day_segment(d: int, sid: str | None = None, days: int = 1, records: int = 3) -> Segment:
    start = FIRST + timedelta(days=d)
    return Segment(
        sid or f"g{d:04d}",
        TABLE,
        TimeRange(start, start + timedelta(days=days)),
        loaded_at=start,
        records=records,
    )


def test_a_mixed_stream_with_every_kind_of_bad_event(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    codec = default_codec()
    # the good segments' rows: one append, as a producer writing Delta itself would
    rows = sample_rows(spark, FIRST, FIRST + timedelta(days=GOOD), GOOD * 3).withColumn(
        "segment_id",
        F.format_string(
            "g%04d", F.floor((F.unix_seconds("event_time") - int(FIRST.timestamp())) / 86400).cast("int")
        ),
    )
    rows.write.format("delta").partitionBy("segment_id").save(table_uri(warehouse, TABLE))
    before = checksum(spark.read.format("delta").load(table_uri(warehouse, TABLE)))

    rng = random.Random(7)
    good = [day_segment(d) for d in range(GOOD)]

    def event(segment: Segment) -> bytes:
        return codec.encode_segment_completed(SegmentCompleted(segment, now_utc()))

    def raw(**changes: Any) -> bytes:
        s = good[0]
        record = {
            "table": TABLE, "segment_id": "x", "start": s.start, "end": s.end, "sub_partitions": [],
            "records": 1, "bytes": 1, "origin": "LOAD", "loaded_at": s.end, "produced_at": s.end,
        } | changes  # fmt: skip
        return codec.encode(SEGMENT_COMPLETED, record)

    last_month = good[-5:]  # early March 2022: that quarter never completes, so these never merge
    bad_makers: dict[str, Callable[[int], bytes]] = {
        "undecodable": lambda i: rng.randbytes(rng.randrange(0, 40)),
        "unknown_schema": lambda i: MAGIC + rng.randbytes(8) + b"\x00\x02",
        "missing_field": lambda i: raw(segment_id=""),
        "unknown_table": lambda i: raw(table="no_such_table", segment_id=f"u{i}"),
        "invalid_range": lambda i: raw(segment_id=f"r{i}", end=good[0].start),
        "overlapping_range": lambda i: event(day_segment(3, sid=f"o{i}", days=2)),
        "duplicate_segment_id": lambda i: event(
            Segment(last_month[i % 5].id, TABLE, last_month[i % 5].range, loaded_at=FIRST, records=100 + i)
        ),
        "rows_not_in_delta": lambda i: event(day_segment(GOOD + 10 + i, sid=f"ghost{i}")),
        "invalid_table_name": lambda i: raw(table="../../etc", segment_id=f"t{i}"),
    }
    kinds = list(bad_makers)
    stream: list[tuple[str | None, bytes]] = [(None, event(s)) for s in good]
    bad: list[tuple[str | None, bytes]] = [
        (kinds[i % len(kinds)], bad_makers[kinds[i % len(kinds)]](i)) for i in range(GOOD // 2)
    ]
    # bad events go anywhere, except that overlaps and duplicates follow the good events they refer to
    late = {"overlapping_range", "duplicate_segment_id"}
    for kind, data in bad:
        if kind not in late:
            stream.insert(rng.randrange(0, len(stream) + 1), (kind, data))
    last_good = max(i for i, (kind, _) in enumerate(stream) if kind is None)
    for kind, data in bad:
        if kind in late:
            stream.insert(rng.randrange(last_good + 1, len(stream) + 1), (kind, data))
    assert len(stream) >= 1000 and len(bad) * 3 >= len(stream)
    producer = EventProducer(kafka)
    producer.send_all([(kafka.segments_topic, TABLE, data, None) for _, data in stream])

    config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["quarter"]}]}})
    handler = build_handler(spark, config, warehouse, kafka, producer=producer, codec=codec)
    JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()

    dead = consume_all(kafka_bootstrap, kafka.dead_letter_topic)
    got = Counter(dict(m.headers())[DEAD_LETTER_REASON_HEADER].decode() for m in dead)
    assert got == Counter(kind for kind, _ in bad), "each bad event dead-lettered once, with its reason"
    assert sorted(m.value() or b"" for m in dead) == sorted(data for _, data in bad), "original bytes kept"
    assert handler.stats.attempt_errors == 0 and handler.stats.failed_merges == 0
    table = spark.read.format("delta").load(table_uri(warehouse, TABLE))
    assert checksum(table) == before, "the good data is intact"
    covered = sorted(handler.catalog.segments(TABLE), key=lambda s: s.start)
    assert covered[0].start == FIRST and covered[-1].end == FIRST + timedelta(days=GOOD)
    assert sum(s.records for s in covered) == GOOD * 3, "every good segment was processed"
    assert handler.stats.merges == 8, "the eight complete quarters merged"

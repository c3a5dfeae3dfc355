"""An event that reaches the running job while its table's first commit is being written (the
table's `_delta_log/` is there, no commit in it yet) is dead-lettered as `unknown_table`, and
poisons nothing: the table's later events are taken once the commit lands, and the load the
early event announced is found in Delta when the job first reads the table (issue 49: every
later event of the table was dead-lettered until the job restarted)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from compactor.client.loader import sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from tests.helpers.jobs import TABLE
from tests.helpers.streaming import JobRunner, consume_all, make_kafka

pytestmark = pytest.mark.integration

CONFIG = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}
MONDAY = datetime(2024, 1, 1, tzinfo=UTC)


def _load_week(spark: Any, warehouse: Path) -> list[Segment]:
    """Seven daily segments in one append carrying their load record, as a loader commits them."""
    segments = [
        Segment(f"d{d:02d}", TABLE, TimeRange(MONDAY + timedelta(days=d), MONDAY + timedelta(days=d + 1)),
                now_utc(), 10)
        for d in range(7)
    ]  # fmt: skip
    frames = [
        sample_rows(spark, s.range.start, s.range.end, 10, seed=n).withColumn(SEGMENT_COLUMN, F.lit(s.id))
        for n, s in enumerate(segments)
    ]
    data = frames[0]
    for frame in frames[1:]:
        data = data.unionByName(frame)
    (
        data.write.format("delta")
        .mode("append")
        .option("userMetadata", commit_metadata("load", segments))
        .partitionBy(SEGMENT_COLUMN)
        .save(table_uri(warehouse, TABLE))
    )
    return segments


def _announce(kafka: KafkaSettings, segments: list[Segment]) -> None:
    codec = default_codec()
    EventProducer(kafka).send_all(
        [
            (
                kafka.segments_topic,
                TABLE,
                codec.encode_segment_completed(SegmentCompleted(s, now_utc())),
                None,
            )
            for s in segments
        ]
    )


def test_an_event_ahead_of_its_tables_first_commit_poisons_none_of_the_later_ones(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse, staging = tmp_path / "warehouse", tmp_path / "staging"
    warehouse.mkdir()
    segments = _load_week(spark, staging)  # another process's first commit, not landed yet
    written, born = Path(table_uri(staging, TABLE)), Path(table_uri(warehouse, TABLE))
    shutil.copytree(written, born, ignore=shutil.ignore_patterns("_delta_log"))
    (born / "_delta_log").mkdir()  # as Delta leaves it before the first commit file exists
    handler = build_handler(spark, load_config(CONFIG), warehouse, kafka)
    runner = JobRunner(spark, handler, kafka, tmp_path / "cp")

    _announce(kafka, segments[:1])  # ahead of the commit
    runner.run_until_quiet()
    assert handler.stats.dead_letters == 1 and handler.catalog.table_names == []

    shutil.copy(written / "_delta_log" / f"{0:020d}.json", born / "_delta_log")  # the commit lands
    _announce(kafka, segments[1:])
    runner.run_until_quiet()

    assert handler.stats.dead_letters == 1, "the later events are taken"
    (dead,) = consume_all(kafka_bootstrap, kafka.dead_letter_topic)
    assert dict(dead.headers() or [])["compactor.dead_letter.reason"] == b"unknown_table"
    (week,) = handler.catalog.segments(TABLE)  # d00 too: its load is read from the table's history
    assert (week.records, str(week.range.start.date()), str(week.range.end.date())) == (
        70,
        "2024-01-01",
        "2024-01-08",
    )
    rows = spark.read.format("delta").load(str(born))
    assert rows.count() == 70 and rows.select(SEGMENT_COLUMN).distinct().count() == 1

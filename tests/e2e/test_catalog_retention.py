"""The catalog outlives the Delta log: a table whose old commit files were cleaned up still merges
a week of loads whose commits are gone after a restart of the real job, because segment facts live
in the catalog store."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.codec.events import default_codec
from compactor.delta.log.reads import read_commits
from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.kafka.producer import EventProducer
from tests.helpers.sales import TABLE, create_table, handler_for, load_days, read_table
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)
SHORT_LOG = {
    # Delta refuses a log retention below the deleted-file retention: shorten both
    "delta.logRetentionDuration": "interval 1 hours",
    "delta.deletedFileRetentionDuration": "interval 1 hours",
    "delta.checkpointInterval": "2",
}


def age(log_dir: Path, days: int = 2) -> None:
    """Make every log file look `days` old: cleanup cuts at day granularity."""
    then = time.time() - days * 86400
    for f in log_dir.iterdir():
        os.utime(f, (then, then))


def in_time_order(segments: Iterable[Segment]) -> list[Segment]:
    return sorted(segments, key=lambda s: s.start)


def test_a_week_merges_after_a_restart_although_the_log_lost_its_first_commits(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    path = create_table(spark, warehouse, SHORT_LOG)
    log_dir = path / "_delta_log"
    loaded = load_days(spark, warehouse, kafka, JAN, 10, rows=5)
    handler = handler_for(spark, warehouse, kafka, ["week", "month"])
    JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()
    week1, *waiting = in_time_order(handler.catalog.segments(TABLE))
    assert (week1.start, week1.end) == (JAN, JAN + timedelta(days=7)) and len(waiting) == 3, "Jan 8-10 wait"

    age(log_dir)
    load_days(spark, warehouse, kafka, JAN + timedelta(days=10), 2, rows=5)  # checkpoints clean the log up
    assert not (log_dir / f"{0:020d}.json").exists(), "Delta removed the oldest commit files"
    recorded = {s.id for r in read_commits(spark, warehouse, TABLE) for s in r.added}
    assert "d20240108" not in recorded, "Jan 8's load is no longer in the table's history"

    restarted = handler_for(spark, warehouse, kafka, ["week", "month"])  # a new job, same checkpoint
    assert restarted.catalog.get(TABLE, "d20240108") is not None, "the catalog still knows it"
    # Jan 13-14 complete the second week, which holds Jan 8: its merge needs the catalog's facts
    load_days(spark, warehouse, kafka, JAN + timedelta(days=12), 2, rows=5)
    before = checksum(read_table(spark, warehouse))
    assert before[0] == 14 * 5
    JobRunner(spark, restarted, kafka, tmp_path / "cp").run_until_quiet()

    first, week2 = in_time_order(restarted.catalog.segments(TABLE))
    assert first.id == week1.id, "the first week, merged before the restart, stands"
    assert (week2.start, week2.end) == (JAN + timedelta(days=7), JAN + timedelta(days=14))
    assert restarted.catalog.get(TABLE, "d20240108") is None, "Jan 8 merged into the second week"
    assert checksum(read_table(spark, warehouse)) == before
    weeks = {week1.id, week2.id}
    ids = {r.segment_id for r in read_table(spark, warehouse).select("segment_id").distinct().collect()}
    assert ids == weeks
    stored = DeltaCatalogStore(spark, warehouse).load()
    assert [s.id for s in in_time_order(stored.segments[TABLE])] == [week1.id, week2.id]
    assert stored.marks[TABLE].version == restarted.keeper.store.latest_version(TABLE)

    # a producer re-sends Jan 2's event (merged away before the restart, its commit long gone
    # from the log), then reuses its id for other data: the first is harmless, the second refused
    # for its id, although its range, over the first week's, would be refused too
    jan2 = next(s for s in loaded if s.id == "d20240102")
    codec = default_codec()
    reused = replace(jan2, range=TimeRange(JAN + timedelta(days=1), JAN + timedelta(days=3)))
    EventProducer(kafka).send_all(
        [(kafka.segments_topic, TABLE, codec.encode_segment_completed(SegmentCompleted(s, now_utc())), None)
         for s in (jan2, reused)]
    )  # fmt: skip
    again = handler_for(spark, warehouse, kafka, ["week", "month"])
    JobRunner(spark, again, kafka, tmp_path / "cp").run_until_quiet()
    (dead,) = consume_all(kafka_bootstrap, kafka.dead_letter_topic)
    headers = {k: v.decode() for k, v in dead.headers() or []}
    assert headers["compactor.dead_letter.reason"] == "duplicate_segment_id"
    assert "was merged away" in headers["compactor.dead_letter.detail"]
    assert "a segment id is never reused" in headers["compactor.dead_letter.detail"]
    assert codec.decode_segment_completed(dead.value()).segment == reused
    assert {s.id for s in again.catalog.segments(TABLE)} == weeks, "neither event added a segment"
    assert checksum(read_table(spark, warehouse)) == before, "nor changed a row"

"""The catalog outlives the Delta log: a table whose old commit files were cleaned up still merges
its whole month after a restart of the real job, because segment facts live in the catalog store."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
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
from compactor.domain.segments import TimeRange
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


def test_a_month_merges_after_a_restart_although_the_log_lost_its_first_commits(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    path = create_table(spark, warehouse, SHORT_LOG)
    log_dir = path / "_delta_log"
    loaded = load_days(spark, warehouse, kafka, JAN, 10, rows=5)
    handler = handler_for(spark, warehouse, kafka, ["week", "month"])
    JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()
    assert len(handler.catalog.segments(TABLE)) == 4, "the first week merged; Jan 8-10 wait"

    age(log_dir)
    load_days(spark, warehouse, kafka, JAN + timedelta(days=10), 2, rows=5)  # checkpoints clean the log up
    assert not (log_dir / f"{0:020d}.json").exists(), "Delta removed the oldest commit files"
    recorded = {s.id for r in read_commits(spark, warehouse, TABLE) for s in r.added}
    assert "d20240108" not in recorded, "Jan 8's load is no longer in the table's history"

    restarted = handler_for(spark, warehouse, kafka, ["week", "month"])  # a new job, same checkpoint
    assert restarted.catalog.get(TABLE, "d20240108") is not None, "the catalog still knows it"
    load_days(spark, warehouse, kafka, JAN + timedelta(days=12), 19, rows=5)
    before = checksum(read_table(spark, warehouse))
    assert before[0] == 31 * 5
    JobRunner(spark, restarted, kafka, tmp_path / "cp").run_until_quiet()

    (month,) = restarted.catalog.segments(TABLE)
    assert (month.start, month.end) == (JAN, datetime(2024, 2, 1, tzinfo=UTC))
    assert checksum(read_table(spark, warehouse)) == before
    assert {r.segment_id for r in read_table(spark, warehouse).select("segment_id").distinct().collect()} == {
        month.id
    }
    stored = DeltaCatalogStore(spark, warehouse).load()
    assert [s.id for s in stored.segments[TABLE]] == [month.id]
    assert stored.marks[TABLE].version == restarted.keeper.store.latest_version(TABLE)

    # a producer re-sends Jan 2's event (merged away before the restart, its commit long gone
    # from the log), then reuses its id for other data: the first is harmless, the second refused
    jan2 = next(s for s in loaded if s.id == "d20240102")
    codec = default_codec()
    reused = replace(jan2, range=TimeRange(JAN + timedelta(days=40), JAN + timedelta(days=41)))
    EventProducer(kafka).send_all(
        [(kafka.segments_topic, TABLE, codec.encode_segment_completed(SegmentCompleted(s, now_utc())), None)
         for s in (jan2, reused)]
    )  # fmt: skip
    JobRunner(
        spark, handler_for(spark, warehouse, kafka, ["week", "month"]), kafka, tmp_path / "cp"
    ).run_until_quiet()
    (dead,) = consume_all(kafka_bootstrap, kafka.dead_letter_topic)
    assert dict(dead.headers())["compactor.dead_letter.reason"] == b"duplicate_segment_id"
    assert codec.decode_segment_completed(dead.value()).segment == reused

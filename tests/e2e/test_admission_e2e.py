"""Admission on a real stream: a merged-away segment id announced again (refused after a restart,
from the durable catalog), and optional merges deferred while a real backlog waits on the topic."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import TimeRange
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.observe.metrics.readiness import ProgressListener, Readiness
from tests.helpers.sales import TABLE, handler_for, load_days
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)


# nightly (CI's time): CI covers it in tests/e2e/test_catalog_retention.py (the same two events
# after a restart, over a log cleaned up) and tests/stream/test_recovery.py's reused-id test
@pytest.mark.nightly
def test_a_merged_away_id_announced_again_is_dead_lettered_and_its_exact_redelivery_ignored(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    loaded = load_days(spark, warehouse, kafka, JAN, 7, rows=4)
    JobRunner(spark, handler_for(spark, warehouse, kafka, ["week"]), kafka, tmp_path / "cp").run_until_quiet()
    table = spark.read.format("delta").load(table_uri(warehouse, TABLE))
    before = checksum(table)

    first, codec = loaded[0], default_codec()
    other = replace(first, range=TimeRange(JAN, JAN + timedelta(days=2)), records=first.records + 5)
    EventProducer(kafka).send_all(
        [(kafka.segments_topic, TABLE, codec.encode_segment_completed(SegmentCompleted(s, s.loaded_at)), None)
         for s in (first, other)]
    )  # fmt: skip
    restarted = handler_for(spark, warehouse, kafka, ["week"])  # what it retired, from the catalog store
    JobRunner(spark, restarted, kafka, tmp_path / "cp").run_until_quiet()

    (dead,) = consume_all(kafka_bootstrap, kafka.dead_letter_topic)
    headers = {k: v.decode() for k, v in dead.headers() or []}
    assert headers["compactor.dead_letter.reason"] == "duplicate_segment_id"
    assert f"segment {first.id} of table {TABLE} was merged away" in headers["compactor.dead_letter.detail"]
    assert "a segment id is never reused" in headers["compactor.dead_letter.detail"]
    assert codec.decode_segment_completed(dead.value()).segment.records == first.records + 5, "the bytes kept"
    (week,) = restarted.catalog.segments(TABLE)
    assert week.range == TimeRange(JAN, JAN + timedelta(days=7)) and restarted.stats.merges == 0
    assert checksum(spark.read.format("delta").load(table_uri(warehouse, TABLE))) == before
    restarted.close()


MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 2]}]}}


def test_a_real_backlog_defers_optional_merges_until_the_job_catches_up(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Twelve loads wait on the topic; the query takes two a batch, so the job is up to ten events
    behind (Spark's own progress reports, read by the job's listener). Level-1 merges (required)
    are planned as their pairs arrive (when they commit depends on the machine); level 2
    (optional) waits for every moment the lag is over 3, and runs once the job has caught up."""
    caplog.set_level(logging.INFO, logger="compactor")
    config = load_config(
        MINOR
        | {
            "operations": {"defer_optional_over_lag": 3},
            "kafka": {"spark_source": {"maxOffsetsPerTrigger": 2}},
        }
    )
    kafka = replace(make_kafka(kafka_bootstrap, unique), config=config.kafka)
    loaded = load_days(spark, warehouse, kafka, JAN, 12, rows=3)  # all on the topic before the job starts
    handler = build_handler(spark, config, warehouse, kafka, codec=default_codec())
    control = handler.control
    read_lag = control.on_lag

    def on_lag(events: float | None) -> None:  # the readings go into the story a failure prints
        logging.getLogger("compactor.test").info("lag reading: %s events behind", events)
        read_lag(events)

    control.on_lag = on_lag  # type: ignore[method-assign]
    listener = ProgressListener(Readiness(kafka), {"segment-compactor": control})
    spark.streams.addListener(listener)
    try:
        JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()
    finally:
        spark.streams.removeListener(listener)

    lines = [r.getMessage() for r in caplog.records if r.name.startswith("compactor")]
    # the job's log in order: it fell behind, caught up, and only then ran level 2 (a level-2 plan
    # needs level-1 outputs, which exist only once the job was behind; later swings of the lag,
    # from the merges' own events, can overlap a commit made from an earlier plan)
    story = "\n".join(lines)
    waits = [i for i, line in enumerate(lines) if "optional merges wait until the job catches up" in line]
    catch_ups = [i for i, line in enumerate(lines) if "optional merges run again" in line]
    assert waits and catch_ups, f"the job never fell behind and caught up:\n{story}"
    waited, caught_up = waits[0], catch_ups[0]
    merges = [(i, line.rsplit("(level-", 1)[1].split(")")[0]) for i, line in enumerate(lines)
              if f"table {TABLE}: minor merged" in line]  # fmt: skip
    assert waited < caught_up, story
    assert all(i > caught_up for i, level in merges if level == "2"), f"optional merge while behind:\n{story}"
    assert sorted(level for _, level in merges) == ["1"] * 6 + ["2"] * 3, story
    # three level-2 segments in the end, each of four neighbouring days: level-1 merges run side
    # by side and may commit out of order, but level 1 is grouped only once none of them runs
    final = handler.catalog.segments(TABLE)
    assert sorted(s.level for s in final) == [2, 2, 2], story
    spans = sorted((s.start, s.end) for s in final)
    assert spans == [(JAN + timedelta(days=d), JAN + timedelta(days=d + 4)) for d in (0, 4, 8)], story
    assert sum(s.records for s in final) == 12 * 3, story
    assert all(handler.catalog.get(TABLE, s.id) is None for s in loaded), "every load merged away"
    assert checksum(spark.read.format("delta").load(table_uri(warehouse, TABLE)))[0] == 12 * 3
    handler.close()

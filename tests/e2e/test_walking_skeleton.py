"""End to end on real Kafka, Spark and Delta: load -> event -> merge -> re-emitted event."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from compactor.codec.events import default_codec
from compactor.domain.events import MergeStatus
from compactor.domain.segments import Origin
from compactor.kafka.producer import EventProducer
from tests.helpers.sales import TABLE, handler_for, load_days, merge_versions, read_table
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration


def test_a_natural_week_merges_once_atomically_and_re_triggers(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    loaded = load_days(spark, warehouse, kafka, datetime(2024, 1, 1, tzinfo=UTC), 7)
    before = checksum(read_table(spark, warehouse))
    assert before[0] == 7 * 20

    handler = handler_for(spark, warehouse, kafka, ["week"])
    JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()

    merges = merge_versions(spark, warehouse)
    assert len(merges) == 1, "exactly one merge commit"
    assert checksum(read_table(spark, warehouse)) == before
    after_ids = {r.segment_id for r in read_table(spark, warehouse).select("segment_id").distinct().collect()}
    assert len(after_ids) == 1
    # time travel to the version before the merge still shows the 7 inputs
    old = read_table(spark, warehouse, merges[0] - 1)
    assert {r.segment_id for r in old.select("segment_id").distinct().collect()} == {s.id for s in loaded}
    assert checksum(old) == before

    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert len(results) == 1
    result = results[0]
    assert result["status"] is MergeStatus.SUCCEEDED
    assert result["inputs"] == sorted(s.id for s in loaded)
    assert result["output"]["segment_id"] == after_ids.pop()
    assert (result["records_in"], result["records_out"]) == (140, 140)
    assert result["table_version"] == merges[0]
    assert result["level"] == "week"

    events = [
        default_codec().decode_segment_completed(m.value())
        for m in consume_all(kafka_bootstrap, kafka.segments_topic)
    ]
    re_emitted = [e for e in events if e.segment.origin is Origin.MERGE]
    assert [e.segment.id for e in re_emitted] == [result["output"]["segment_id"]]
    assert re_emitted[0].plan_id == result["plan_id"]
    assert all(m.key() == TABLE.encode() for m in consume_all(kafka_bootstrap, kafka.segments_topic))
    # the re-emitted event triggered one more attempt, which found nothing to do
    assert handler.stats.attempts_by_origin == {"load": 7, "merge": 1}
    assert handler.stats.merges == 1
    assert handler.stats.empty_attempts == 7


def test_a_month_of_days_cascades_to_one_month_segment(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    # Kylin's auto-merge example 2 shows why: two merges become possible at once, one per attempt.
    handler = handler_for(spark, warehouse, kafka, ["week", "month"])
    load_days(spark, warehouse, kafka, datetime(2024, 2, 1, tzinfo=UTC), 29, rows=5)
    before = checksum(read_table(spark, warehouse))
    JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()

    segments = handler.catalog.segments(TABLE)
    assert len(segments) == 1
    month = segments[0]
    assert (month.start, month.end) == (datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 3, 1, tzinfo=UTC))
    assert checksum(read_table(spark, warehouse)) == before
    ids = {r.segment_id for r in read_table(spark, warehouse).select("segment_id").distinct().collect()}
    assert ids == {month.id}
    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert [r["level"] for r in results][-1] == "month"
    assert len(merge_versions(spark, warehouse)) == len(results) == handler.stats.merges


def test_replays_merge_nothing_twice(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    loaded = load_days(spark, warehouse, kafka, datetime(2024, 1, 1, tzinfo=UTC), 7, rows=5)
    stale = handler_for(spark, warehouse, kafka, ["week"])  # its catalog predates the merge
    fresh = handler_for(spark, warehouse, kafka, ["week"])
    checkpoint = tmp_path / "checkpoint"
    JobRunner(spark, fresh, kafka, checkpoint).run_until_quiet()
    assert len(merge_versions(spark, warehouse)) == 1
    before = checksum(read_table(spark, warehouse))

    # 1. a replayed batch: the same events reach a handler that has not seen the merge
    batch = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", kafka.segments_topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    stale(batch, 0)
    stale.settle()  # the batch started the merge; it runs beside the batches
    assert stale.stats.replayed_merges == 1 and stale.stats.merges == 0

    # 2. the same load events delivered again, to the running job
    producer = EventProducer(kafka)
    codec = default_codec()
    from compactor.domain.events import SegmentCompleted

    producer.send_all(
        [
            (
                kafka.segments_topic,
                TABLE,
                codec.encode_segment_completed(SegmentCompleted(s, s.loaded_at)),
                None,
            )
            for s in loaded
        ]
    )
    JobRunner(spark, fresh, kafka, checkpoint).run_until_quiet()

    # 3. a crash after the first batch's work but before Spark recorded it: every
    # batch's commit marker is removed, so a restart on the same checkpoint re-runs them
    for marker in (checkpoint / "commits").iterdir():
        marker.unlink()
    restarted = handler_for(spark, warehouse, kafka, ["week"])
    JobRunner(spark, restarted, kafka, checkpoint).run_until_quiet()
    assert restarted.stats.events > 0, "the restart replayed the uncommitted batch"

    assert len(merge_versions(spark, warehouse)) == 1
    assert checksum(read_table(spark, warehouse)) == before
    assert fresh.stats.dead_letters == 0 and restarted.stats.merges == 0
    assert [s.id for s in restarted.catalog.segments(TABLE)] == [s.id for s in fresh.catalog.segments(TABLE)]

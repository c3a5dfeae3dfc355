"""Watermark sealing on the real stream: a sealed week takes three late days and is rewritten once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.client.loader import load_segment, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.domain.segments import Segment, TimeRange
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

MONDAY = datetime(2024, 1, 1, tzinfo=UTC)  # week 1 is [Jan 1, Jan 8)
WEEK_1 = TimeRange(MONDAY, MONDAY + timedelta(days=7))
CONFIG = {
    "defaults": {
        "rules": [{"rule": "auto_merge", "levels": ["day", "week"], "sealing": {"late_fold_ratio": 0.1}}]
    }
}


def test_a_sealed_week_takes_three_late_days_and_is_rewritten_once_at_the_fold(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    handler = build_handler(
        spark, load_config(CONFIG), warehouse, kafka, producer=producer, codec=default_codec()
    )
    job = JobRunner(spark, handler, kafka, tmp_path / "cp")

    def load(sid: str, day: int, rows: int) -> Segment:
        start = MONDAY + timedelta(days=day)
        data = sample_rows(spark, start, start + timedelta(days=1), rows, seed=day)
        return load_segment(
            spark, warehouse, kafka, producer, "clicks", data, start, start + timedelta(days=1), sid
        )

    for day in range(8):  # week 1 and the Monday after it: the week merges, and is sealed
        load(f"day{day}", day, 5000)
    job.run_until_quiet()
    (week,) = [s for s in handler.catalog.segments("clicks") if s.range == WEEK_1]

    # two small late days: under 10 % of the week's bytes, they wait beside it
    small = [load("late_wed", 2, 10), load("late_thu", 3, 10)]
    job.run_until_quiet()
    assert sum(s.bytes for s in small) < 0.1 * week.bytes, (small, week.bytes)
    held = {s.id for s in handler.catalog.segments("clicks")}
    assert held == {week.id, "day7", "late_wed", "late_thu"}, "the sealed week is not rewritten"

    big = load("late_fri", 4, 10_000)  # the third late day takes the late bytes past 10 %
    assert sum(s.bytes for s in [*small, big]) >= 0.1 * week.bytes
    table = spark.read.format("delta").load(str(warehouse / "clicks"))
    before = checksum(table)
    job.run_until_quiet()

    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert [r["level"] for r in results] == ["week", "fold:week"], "the week: merged once, rewritten once"
    fold = results[-1]
    assert sorted(fold["inputs"]) == sorted([week.id, "late_wed", "late_thu", "late_fri"])
    after = spark.read.format("delta").load(str(warehouse / "clicks"))
    assert checksum(after) == before
    assert after.count() == 8 * 5000 + 10 + 10 + 10_000
    output = fold["output"]["segment_id"]
    assert {s.id: s.range for s in handler.catalog.segments("clicks")} == {
        output: WEEK_1,
        "day7": TimeRange(MONDAY + timedelta(days=7), MONDAY + timedelta(days=8)),
    }
    assert sorted(r.segment_id for r in after.select("segment_id").distinct().collect()) == sorted(
        [output, "day7"]
    )

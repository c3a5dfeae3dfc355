"""ProducerAdvice: small loads that pile up unmerged get their producers told what to do instead."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from compactor.codec.events import default_codec
from compactor.domain.columns import SegmentColumns
from compactor.domain.events import ProducerAdvice
from compactor.domain.segments import Origin
from compactor.stream.advice import advise
from tests.helpers.harness import Harness

MB = 1 << 20
NOW = datetime(2024, 6, 1, tzinfo=UTC)


def test_advice_counts_unmerged_small_loads_and_scales_the_interval(harness: Harness) -> None:
    loads = [replace(harness.day(i), bytes=(8 + i) * MB) for i in range(5)]
    merged = replace(harness.day(9, sid="m-x"), bytes=MB, origin=Origin.MERGE)  # not a load
    big = replace(harness.day(10, sid="big"), bytes=500 * MB)
    columns = SegmentColumns.of([*loads, merged, big])
    assert advise("t", columns, ceiling=5, min_bytes=128 * MB, loads_per_hour=4, now=NOW) is None
    advice = advise("t", columns, ceiling=4, min_bytes=128 * MB, loads_per_hour=4, now=NOW)
    assert advice is not None
    assert (advice.small_segments, advice.median_segment_bytes, advice.min_segment_bytes) == (
        5,
        10 * MB,
        128 * MB,
    )
    assert advice.batch_interval_seconds == 900 * 128 // 10, "every 15 min, 12.8 times longer"
    assert "5 loads smaller than 134217728 bytes wait unmerged (ceiling 4)" in advice.reason
    unknown_rate = advise("t", columns, ceiling=4, min_bytes=128 * MB, loads_per_hour=0, now=NOW)
    assert unknown_rate is not None and unknown_rate.batch_interval_seconds is None


def test_advice_round_trips_through_its_schema() -> None:
    codec = default_codec()
    advice = ProducerAdvice("t", "why", 5, 4, 10 * MB, 128 * MB, None, NOW)
    assert codec.decode_producer_advice(codec.encode_producer_advice(advice)) == advice


def test_the_stream_advises_once_an_hour_on_the_advice_topic(harness: Harness) -> None:
    harness.store.create("t")
    config = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}],
                           "producer_advice": {"max_small_segments": 3, "min_segment_size": "64MB"}}}  # fmt: skip
    handler = harness.handler(config)
    days = [replace(harness.day(i), bytes=MB) for i in (0, 2, 4, 6, 8)]  # gaps: nothing merges
    handler.process(harness.loaded(*days))
    assert harness.publisher.on("compactor.advice") == [], (
        "only full evaluations advise: the first saw one load"
    )
    harness.clock.now += timedelta(seconds=61)
    handler.process(harness.loaded(replace(harness.day(10), bytes=MB)))
    (message,) = harness.publisher.on("compactor.advice")
    assert message[1] == "t"
    advice = default_codec().decode_producer_advice(message[2])
    assert (advice.table, advice.small_segments, advice.ceiling, advice.min_segment_bytes) == (
        "t", 6, 3, 64 * MB,
    )  # fmt: skip
    harness.clock.now += timedelta(seconds=61)
    handler.process(harness.loaded(replace(harness.day(12), bytes=MB)))
    assert len(harness.publisher.on("compactor.advice")) == 1, "at most once an hour"
    harness.clock.now += timedelta(hours=1)
    handler.process(harness.loaded(replace(harness.day(14), bytes=MB)))
    assert len(harness.publisher.on("compactor.advice")) == 2

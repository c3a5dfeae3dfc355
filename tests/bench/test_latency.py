"""bench/latency.py's reading of Spark's progress reports: which batch read an event, and when
its trigger fired."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from tests.bench import bench_module


@pytest.fixture(scope="module")
def latency():  # type: ignore[no-untyped-def]
    return bench_module("latency")


def progress(at: str, start: dict[str, Any] | None, end: dict[str, Any], took: int) -> dict[str, Any]:
    source = {"startOffset": json.dumps(start), "endOffset": json.dumps(end)}
    return {"timestamp": at, "sources": [source], "durationMs": {"triggerExecution": took}}


def test_the_batch_that_read_an_offset_is_found_with_the_time_its_trigger_fired(latency) -> None:  # type: ignore[no-untyped-def]
    query = SimpleNamespace(
        recentProgress=[
            progress("2026-11-30T05:00:00.000Z", None, {"seg": {"0": 3, "1": 0}}, 40),
            progress("2026-11-30T05:00:00.500Z", {"seg": {"0": 3, "1": 0}}, {"seg": {"0": 3, "1": 0}}, 2),
            progress("2026-11-30T05:00:01.250Z", {"seg": {"0": 3, "1": 0}}, {"seg": {"0": 5, "1": 1}}, 310),
        ]
    )
    reports = latency.batch_reports(query)
    assert [r.offsets for r in reports] == [
        {("seg", 0): (0, 3)},
        {},
        {("seg", 0): (3, 5), ("seg", 1): (0, 1)},
    ]
    found = latency.batch_holding(reports, "seg", 0, 4)
    assert found is reports[2] and found.durations == {"triggerExecution": 310}
    assert reports[2].started - reports[0].started == pytest.approx(1.25)
    assert latency.batch_holding(reports, "seg", 0, 2) is reports[0]
    assert latency.batch_holding(reports, "seg", 1, 1) is None, "not read yet"
    assert latency.batch_holding(reports, "other", 0, 0) is None
    sent_at = reports[0].started + 0.5  # a message sent half a second after the first trigger
    waits = latency.trigger_waits(reports, "seg", [(sent_at, (0, 4)), (sent_at, (1, 1))])
    assert waits[0] is not None and waits[0][1] is reports[2]
    assert waits[0][0] == pytest.approx(750.0), "waited from its send to its batch's trigger"
    assert waits[1] is None

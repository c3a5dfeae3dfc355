"""A micro-batch as the handler is called with it: its records come from the handler's reader, are
worked as events, and who read them (the driver or Spark) is counted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from compactor.domain.events import MergeStatus
from tests.helpers.harness import Harness

MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}


class Row(NamedTuple):
    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int


class GivenRows:
    """A reader that hands over the rows it was given, as `by` says it read them."""

    def __init__(self, rows: Sequence[Row], by: str) -> None:
        self.rows, self.by, self.closed = rows, by, False
        self.batches: list[Any] = []

    def __call__(self, batch: Any) -> tuple[Sequence[Any], str]:
        self.batches.append(batch)
        return self.rows, self.by

    def close(self) -> None:
        self.closed = True


def test_the_readers_rows_are_the_batchs_events_and_the_reader_is_counted(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    events = harness.loaded(harness.day(0), harness.day(1), harness.day(2))
    rows = [Row(b"t", e.value, "segments", 0, i) for i, e in enumerate(events)]
    batch: Any = "batch-0"  # the reader alone looks at Spark's DataFrame
    handler.read_batch = reader = GivenRows(rows, "driver")
    handler(batch, 0)
    assert reader.batches == ["batch-0"]
    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    handler.read_batch = spark_read = GivenRows([], "spark")
    handler(batch, 1)
    sample = handler.metrics.registry.get_sample_value
    assert sample("compactor_batch_reads_total", {"by": "driver"}) == 1
    assert sample("compactor_batch_reads_total", {"by": "spark"}) == 1
    assert sample("compactor_events_total") == 3
    handler.close()
    assert spark_read.closed

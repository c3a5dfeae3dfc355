"""Gauges of late data in sealing tables, read off the catalog at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from compactor.config.rules import RuleConfig
from compactor.domain.segments import Segment
from compactor.rules.late_data import of_table

SealingView = tuple[str, Sequence[Segment], Iterable[RuleConfig]]
GAUGES = {
    "watermark": (
        "compactor_watermark_seconds",
        "Event-time watermark: the latest event end held minus the allowed lateness (epoch s).",
    ),
    "segments": ("compactor_late_segments", "Late segments waiting beside what they overlap."),
    "bytes": ("compactor_late_bytes", "Bytes of late segments waiting beside what they overlap."),
    "sealed": ("compactor_late_sealed_buckets", "Sealed late runs waiting to fold."),
}


class LateDataCollector(Collector):
    """Per sealing table: the watermark, and the late segments and bytes waiting to fold."""

    def __init__(self, tables: Callable[[], Iterable[SealingView]]) -> None:
        self.tables = tables

    def collect(self) -> Iterator[Metric]:
        gauges = {
            key: GaugeMetricFamily(name, text, labels=["table"]) for key, (name, text) in GAUGES.items()
        }
        try:
            views = list(self.tables())
        except RuntimeError:  # the batch thread changed the catalog while it was read: next scrape
            views = []
        for table, segments, rules in views:
            late = of_table(segments, rules)
            if late is None:
                continue
            if late.watermark is not None:
                gauges["watermark"].add_metric([table], late.watermark)
            gauges["segments"].add_metric([table], sum(len(r.late) for r in late.runs))
            gauges["bytes"].add_metric([table], sum(r.late_bytes for r in late.runs))
            gauges["sealed"].add_metric([table], sum(1 for r in late.runs if r.sealed))
        yield from gauges.values()

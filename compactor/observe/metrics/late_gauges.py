"""Gauges of late data in sealing tables, read off the catalog at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from compactor.config.rules import RuleConfig
from compactor.domain.segments import Segment
from compactor.observe.metrics.declared import gauge_family
from compactor.rules.late_data import of_table

SealingView = tuple[str, Sequence[Segment], Iterable[RuleConfig]]
GAUGES = {
    "watermark": "compactor_watermark_seconds",
    "segments": "compactor_late_segments",
    "bytes": "compactor_late_bytes",
    "sealed": "compactor_late_sealed_buckets",
}


class LateDataCollector(Collector):
    """Per sealing table: the watermark, and the late segments and bytes waiting to fold."""

    def __init__(self, tables: Callable[[], Iterable[SealingView]]) -> None:
        self.tables = tables

    def collect(self) -> Iterator[Metric]:
        gauges = {key: gauge_family(name) for key, name in GAUGES.items()}
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

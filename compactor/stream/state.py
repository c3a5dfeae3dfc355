"""What the stream's parts share: the tables, their segments and configs, the clock, the counters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from compactor.catalog.fold import SegmentCatalog
from compactor.delta.store import TableStore
from compactor.stream.control import Control
from compactor.stream.recovery import Unannounced
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.stats import HandlerStats
from compactor.stream.table_configs import TableConfigs


@dataclass
class StreamState:
    """The store is the truth; the catalog is the job's view of it, kept by admission and the runner."""

    store: TableStore
    catalog: SegmentCatalog
    configs: TableConfigs
    clock: Callable[[], datetime]
    stats: HandlerStats
    unannounced: Unannounced
    metrics: MetricsSink = field(default_factory=NoMetrics)  # reported to, never read back
    control: Control = field(default_factory=Control)  # what planning reads besides the catalog

    def load_order(self, table: str) -> dict[str, datetime]:
        """When each live segment of the table was loaded (upsert tables break ties with it)."""
        return {s.id: s.loaded_at for s in self.catalog.segments(table)}

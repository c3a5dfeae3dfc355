"""What the stream's parts share: the tables, their segments and configs, the clock, the counters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from compactor.catalog.fold import SegmentCatalog
from compactor.delta.store import TableStore
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

"""The catalog store with every call timed into the job's metrics (Hydrolix's merge
troubleshooting lists the catalog's query latency among what to look at first when merges lag)."""

from __future__ import annotations

from collections.abc import Sequence

from compactor.catalog.retired import RetiredSegment
from compactor.catalog.store import CatalogChanges, CatalogStore, StoredCatalog
from compactor.stream.reporting import MetricsSink


class TimedCatalogStore:
    """Delegates to `store`; each load, save and retired-lookup observed as one operation."""

    def __init__(self, store: CatalogStore, metrics: MetricsSink) -> None:
        self.store = store
        self.metrics = metrics

    def load(self) -> StoredCatalog:
        with self.metrics.catalog("load"):
            return self.store.load()

    def save(self, changes: CatalogChanges) -> None:
        if not changes:  # nothing to write: not a call worth a sample
            return
        with self.metrics.catalog("save"):
            self.store.save(changes)

    def retired(self, table: str, segment_ids: Sequence[str]) -> dict[str, RetiredSegment]:
        with self.metrics.catalog("retired"):
            return self.store.retired(table, segment_ids)

    def merged_by(self, table: str, plan_ids: Sequence[str]) -> dict[str, set[str]]:
        with self.metrics.catalog("retired"):
            return self.store.merged_by(table, plan_ids)

    def upkeep(self) -> None:
        self.store.upkeep()  # not timed: most calls find nothing due

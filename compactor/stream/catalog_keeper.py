"""The catalog kept level with the tables and durable.

Every way the catalog catches up with a table goes through here: a table start-up left unread
is read before its first use (or by the sweep between batches); a table others wrote to is
folded forward; a table whose plan went stale, or that a table-wide rewrite replaced, is checked
against the rows Delta holds. What a check recounts is reported (the rows other writers
deleted) and offered to the purges. A save folds the tables a batch touched and makes the
catalog durable before Spark records the batch's offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from compactor.catalog.fold import SegmentCatalog
from compactor.catalog.store import CatalogStore
from compactor.delta.store import TableStore
from compactor.domain.segments import Segment
from compactor.errors import Fenced
from compactor.stream.announcer import Announcer
from compactor.stream.purging import Purges
from compactor.stream.recovery import Unannounced, Unread, catch_up
from compactor.stream.reporting import MetricsSink, NoMetrics

SAVE_EVERY_S = 5.0  # between batches, the catalog is saved at most this often


class CatalogKeeper:
    def __init__(
        self,
        store: TableStore,
        catalog: SegmentCatalog,
        catalog_store: CatalogStore,
        unannounced: Unannounced,
        unread: Unread,
        announcer: Announcer,
        purges: Purges,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog  # folded forward from the tables' commits
        self.catalog_store = catalog_store
        self.unannounced = unannounced
        self.unread = unread  # tables start-up left to catch up
        self.announcer = announcer  # a crash's merges, found on catching up, are announced
        self.purges = purges
        self.metrics = metrics or NoMetrics()
        # tables a table-wide rewrite replaced: checked against the table when the batch saves,
        # since the overwrite also took whatever was loaded between planning and its read
        self._check_at_save: set[str] = set()
        self._saved_at = 0.0  # monotonic seconds
        self._fenced = False

    def current(self, table: str) -> bool:
        """Catch up a table start-up left unread (its commits since the mark folded, a crash's
        merges announced) before anything reads or plans it; False for any other table."""
        if not self.unread.take(table):
            return False
        self.recounted(catch_up(self.store, self.catalog, table, self.unannounced))
        self.announcer.announce_unannounced([table])
        return True

    def sweep(self, count: int) -> None:
        """Catch up the next `count` tables start-up left unread."""
        for table in self.unread.next(count):
            self.current(table)

    def is_unread(self, table: str) -> bool:
        return table in self.unread

    def follow(self, table: str) -> None:
        """Fold the commits others made to a table (caught up first if it was unread)."""
        if not self.current(table):
            self._catch_up(table)

    def check(self, table: str) -> None:
        """Fold the table's commits and check the catalog against the rows it holds."""
        self._catch_up(table, check=True)

    def check_at_save(self, table: str) -> None:
        """Check the table when the batch saves (a rewrite of it replaced more than it planned)."""
        self._check_at_save.add(table)

    def _catch_up(self, table: str, check: bool = False) -> None:
        """Fold the table's commits (and check it, if asked); then announce what the fold found
        that was reported FAILED but committed all the same."""
        self.recounted(catch_up(self.store, self.catalog, table, self.unannounced, check))
        self.announcer.announce_owed([table])

    def recounted(self, segments: Iterable[Segment]) -> None:
        """Segments a check recounted: the tables' deleted rows reported, purges queued."""
        segments = list(segments)
        for table in sorted({s.table for s in segments}):
            held = self.catalog.segments(table)
            deleted = sum(s.deleted for s in held)
            self.metrics.on_deleted_rows(table, deleted, deleted + sum(s.records for s in held))
        self.purges.offer(segments)

    def upkeep_store(self) -> None:
        """The durable store's own upkeep, when due (the catalog table compacted and vacuumed)."""
        self.catalog_store.upkeep()

    def fence(self) -> None:
        """The shard was lost: its part of the catalog is saved no more (its next holder's job
        writes that journal now; two writers would interleave it)."""
        self._fenced = True

    @property
    def fenced(self) -> bool:
        return self._fenced

    def save(self, tables: Iterable[str] = ()) -> None:
        """Fold the touched tables' newest commits into the catalog, then make it durable."""
        if self._fenced:
            raise Fenced("the shard's lease was lost: its catalog is saved no more")
        checked, self._check_at_save = self._check_at_save, set()
        for table in sorted(set(tables) | checked):
            self._catch_up(table, table in checked)
        self.unannounced.report(self.catalog)
        changes = self.catalog.take_changes()
        try:
            self.catalog_store.save(changes)
        except BaseException:
            self.catalog.put_back(changes)  # the next save writes it (again: rows fold latest-wins)
            raise
        self._saved_at = time.monotonic()

    def save_if_due(self) -> None:
        """Between batches: save what changed, at most every `SAVE_EVERY_S` (a batch saves before
        Spark records its offsets; between batches a save only spares a restart announcing
        merges again, which Delta holds anyway)."""
        if self._fenced:
            return
        if self.catalog.changed and time.monotonic() - self._saved_at >= SAVE_EVERY_S:
            with self.metrics.phase("catalog"):
                self.save()

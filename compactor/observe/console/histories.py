"""The commit histories of the tables the console shows, each read whole once and then only by
the commits since its last read.

A table's page refreshes every 2 seconds. Reading the table's whole history on each refresh
re-read every commit file the log holds, and once Delta's log cleanup had removed the first
ones it ran a `DESCRIBE HISTORY` Spark job on the driver each time (in the job's own driver for
a job's console). Here a refresh reads only the commit files after the newest version already
read; the whole history is read again only when those are gone too (`LogGap`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

from compactor.catalog.changes import CommitRecord
from compactor.delta.store import TableStore
from compactor.errors import LogGap

TABLES_KEPT = 32  # the tables whose histories are kept; the least recently shown are dropped


@dataclass(frozen=True)
class _Read:
    store: weakref.ref[TableStore]  # whose read: a shard's store is not kept alive by the console
    records: tuple[CommitRecord, ...]
    through: int  # the newest version read (-1: none)


class Histories:
    def __init__(self, kept: int = TABLES_KEPT) -> None:
        self.kept = kept
        self._read: OrderedDict[str, _Read] = OrderedDict()
        self._lock = threading.Lock()  # the server's threads share the histories

    def of(self, store: TableStore, table: str) -> list[CommitRecord]:
        """The table's commit records, oldest first, as `store.history` gives them."""
        with self._lock:
            known = self._read.pop(table, None)
        if known is None or known.store() is not store:  # new, or another shard's store now
            read = self._whole(store, table)
        else:
            read = self._since(store, table, known)
        with self._lock:
            self._read[table] = read
            while len(self._read) > self.kept:
                self._read.popitem(last=False)
        return list(read.records)

    def _since(self, store: TableStore, table: str, known: _Read) -> _Read:
        try:
            changes = store.changes_since(table, known.through)
        except LogGap:  # cleanup removed what came after the last read: read it whole again
            return self._whole(store, table)
        if changes.latest <= known.through:
            return known
        return _Read(known.store, (*known.records, *changes.records), changes.latest)

    def _whole(self, store: TableStore, table: str) -> _Read:
        latest = store.latest_version(table)  # first: a commit landing meanwhile is read next time
        records = tuple(store.history(table))
        return _Read(weakref.ref(store), records, max(latest, records[-1].version if records else -1))

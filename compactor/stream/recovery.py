"""Start-up and re-plan: the catalog brought up to date with the tables, and checked against them.

At start-up the catalog is read from its durable store, then each table's
commits since the stored mark are folded in (they are recent, so Delta's log
still holds them). A warehouse of many tables would wait for one look at every
log before its first batch, so start-up reads the logs of the first
`EAGER_TABLES` known tables only; the rest stay `Unread` until their first event,
their first attempt or the handler's sweep, whichever comes first (each of those
catches the table up before anything reads or plans it).

Truth lives in Delta: where someone else changed a table, or the log no longer
reaches back to the mark, the catalog is checked against the rows the table
holds; segments whose rows are gone are dropped, and rows without compactor
metadata are reported (never merged: nothing says what they cover).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from compactor.catalog.changes import CommitRecord, SegmentsGone
from compactor.catalog.fold import SegmentCatalog
from compactor.catalog.store import CatalogStore
from compactor.delta.store import TableStore
from compactor.domain.segments import Segment
from compactor.errors import LogGap

log = logging.getLogger(__name__)

UNANNOUNCED_GRACE = timedelta(minutes=10)
EAGER_TABLES = 200  # known tables whose logs start-up reads; the rest are caught up later
UNKNOWN_ROWS_ACTION = (
    "announce it with a SegmentCompleted event (the producer contract), or delete its rows; "
    "until then it is never merged"
)


def recover(
    store: TableStore,
    catalog_store: CatalogStore,
    unannounced: Unannounced,
    owns: Callable[[str], bool] = lambda _: True,
    eager: int = EAGER_TABLES,
) -> tuple[SegmentCatalog, list[str], Unread]:
    """The catalog as stored, caught up with the tables' commits since and reconciled (the
    first `eager` known tables, and every new one), with the tables that were new to it and
    the known ones left unread. A shard's job recovers the tables it `owns`."""
    catalog = SegmentCatalog.from_store(catalog_store.load())
    known = set(catalog.table_names)
    tables = [t for t in store.tables(known) if owns(t)]
    new = [t for t in tables if t not in known]
    later = [t for t in tables if t in known][eager:]
    for table in sorted(set(tables) - set(later)):
        catch_up(store, catalog, table, unannounced)
    for table in known - set(tables):
        log.warning("table %s: no longer in the warehouse; its segments leave the catalog", table)
        catalog.apply(SegmentsGone(table, frozenset(s.id for s in catalog.segments(table))))
    if later:
        log.info("%d table(s) are caught up with their logs when first used, or by the sweep", len(later))
    return catalog, new, Unread(later)


class Unread:
    """Known tables whose logs start-up did not read, in name order: each is caught up
    before its first use, and a few per tick by the handler's sweep."""

    def __init__(self, tables: Iterable[str] = ()) -> None:
        self._left = dict.fromkeys(sorted(tables))

    def __len__(self) -> int:
        return len(self._left)

    def __contains__(self, table: object) -> bool:
        return table in self._left

    def take(self, table: str) -> bool:
        """Whether `table` was unread (it no longer is: the caller catches it up)."""
        if table not in self._left:
            return False
        del self._left[table]
        return True

    def next(self, count: int) -> list[str]:
        """The next `count` tables for the sweep (still unread until taken)."""
        return list(itertools.islice(self._left, count))


def catch_up(
    store: TableStore, catalog: SegmentCatalog, table: str, unannounced: Unannounced, check: bool = False
) -> list[Segment]:
    """Fold the table's commits since the catalog's mark, so that the mark says exactly how far
    the catalog reaches; check it against the table when others wrote to it, when the log no
    longer reaches back to the mark, when the table is new to the catalog, or when asked.
    Returns the segments a check recounted (others deleted rows from them)."""
    since = catalog.version(table)
    if since is None:  # a table the catalog has never seen: its history, as far as Delta keeps it
        log.info("table %s: not in the catalog yet; reading its history", table)
        _fold(catalog, store.history(table))
        catalog.advance(table, store.latest_version(table))
        check = True
    else:
        recall = catalog.to_recall(table)
        if recall:
            _recall(store, catalog, table, recall, since)
        try:
            changes = store.changes_since(table, since)
        except LogGap as exc:
            log.warning("table %s: %s; checking the catalog against the table", table, exc)
            catalog.advance(table, store.latest_version(table))
            check = True
        else:
            _fold(catalog, changes.records)
            catalog.advance(table, changes.latest)
            if changes.foreign:
                log.info("table %s: versions %s were written by others; checking", table, changes.foreign)
                check = True
    return reconcile(store, catalog, table, unannounced) if check else []


def _recall(
    store: TableStore, catalog: SegmentCatalog, table: str, versions: tuple[int, ...], since: int
) -> None:
    """The merges the last run folded and did not announce (the catalog's mark is past them):
    read again from the log, so that the announcer finds them."""
    try:
        changes = store.changes_since(table, min(versions) - 1)
    except LogGap as exc:
        log.warning(
            "table %s: the merges at versions %s were never announced, and the log no longer holds "
            "them (%s): consumers are not told of them",
            table,
            list(versions),
            exc,
        )
        return
    for record in changes.records:
        if record.version in versions and record.version <= since:
            catalog.recall(record)


def _fold(catalog: SegmentCatalog, records: list[CommitRecord]) -> None:
    for record in records:
        if not _told_already(catalog, record):
            catalog.apply(record)


def _told_already(catalog: SegmentCatalog, record: CommitRecord) -> bool:
    """A sub-partition commit whose values the catalog already lists: its event told the
    segment's new totals, which folding the commit's relative metrics again would double."""
    if record.op != "sub_partition":
        return False
    known = [catalog.get(record.table, s.id) for s in record.added]
    return all(
        k is not None and s.sub_partitions <= k.sub_partitions
        for k, s in zip(known, record.added, strict=True)
    )


def reconcile(
    store: TableStore, catalog: SegmentCatalog, table: str, unannounced: Unannounced
) -> list[Segment]:
    """Drop what the table no longer holds; note rows the compactor has no record of yet; take
    the rows Delta counts for the rest. Returns the segments recounted."""
    counts = store.row_counts(table)
    unknown, gone = catalog.reconcile(table, counts)
    unannounced.saw(table, unknown)
    if gone:
        log.warning(
            "table %s: dropped %d catalog segment(s) Delta no longer holds: %s",
            table,
            len(gone),
            sorted(gone),
        )
    return catalog.recount(table, counts)


class Unannounced:
    """Rows in Delta that no SegmentCompleted event has described. A producer writes Delta first
    and announces after, so its event may simply not have arrived (mid-batch, or still in the
    topic at start-up): a segment is reported as a problem only when its event is still missing
    `grace` after it was first seen."""

    def __init__(self, clock: Callable[[], datetime], grace: timedelta = UNANNOUNCED_GRACE) -> None:
        self.clock = clock
        self.grace = grace
        self._first_seen: dict[tuple[str, str], datetime] = {}
        self._reported: set[tuple[str, str]] = set()

    def saw(self, table: str, segment_ids: set[str]) -> None:
        """The ids a check of `table` found without a record (the others of the table are fine now)."""
        now = self.clock()
        for key in [k for k in self._first_seen if k[0] == table and k[1] not in segment_ids]:
            del self._first_seen[key]
        for sid in sorted(segment_ids):
            if (table, sid) not in self._first_seen:
                self._first_seen[(table, sid)] = now
                log.info("table %s: segment %s is in Delta but not announced yet", table, sid)

    def report(self, catalog: SegmentCatalog) -> list[tuple[str, str]]:
        """Warn (once) about each segment whose event is still missing after the grace."""
        now, due = self.clock(), []
        for (table, sid), first in sorted(self._first_seen.items()):
            if catalog.knows(table, sid):  # its event came (it may be merged away already)
                del self._first_seen[(table, sid)]
            elif now - first >= self.grace and (table, sid) not in self._reported:
                self._reported.add((table, sid))
                due.append((table, sid))
                log.warning(
                    "table %s: segment %s is in Delta without compactor metadata: %s",
                    table,
                    sid,
                    UNKNOWN_ROWS_ACTION,
                )
        return due

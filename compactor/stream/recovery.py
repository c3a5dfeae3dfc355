"""Start-up and re-plan: the catalog rebuilt from what the tables record, then checked against them.

Truth lives in Delta: segments whose rows are gone are dropped from the
catalog; rows without compactor metadata are reported (and never merged,
since nothing says what time range they cover).
"""

from __future__ import annotations

import logging

from compactor.catalog.changes import TableReloaded
from compactor.catalog.fold import SegmentCatalog
from compactor.delta.store import TableStore

log = logging.getLogger(__name__)


def rebuild_catalog(store: TableStore) -> SegmentCatalog:
    """Every table's recorded commits folded, then reconciled with the rows each table holds."""
    commits = {table: store.history(table) for table in store.tables()}
    catalog = SegmentCatalog.from_commits(commits)
    for table in commits:
        unknown, gone = catalog.reconcile(table, store.row_counts(table))
        for sid in sorted(unknown):
            log.warning(
                "table %s: segment %s is in Delta without compactor metadata; it is never merged. "
                "Announce it with a SegmentCompleted event, or remove its rows",
                table,
                sid,
            )
        if gone:
            log.warning(
                "table %s: dropped %d catalog segment(s) that Delta no longer holds", table, len(gone)
            )
    return catalog


def reload_table(store: TableStore, catalog: SegmentCatalog, table: str) -> None:
    """Bring one table's view in line with its table now: recorded segments win over what
    events said, and segments the table no longer holds are dropped (ones known only from
    events, and present, stay)."""
    fresh = SegmentCatalog.from_commits({table: store.history(table)})
    catalog.apply(TableReloaded(table, tuple(fresh.segments(table)), fresh.retired_ids(table)))
    catalog.reconcile(table, store.row_counts(table))

"""A shard's start-up, in two halves around the wiring (`wiring.assemble`).

Before it, the catalog is read from its durable store and caught up with the tables
(`recovery.recover`: the first `eager` known tables at once, the rest when first used). After it,
what the last run left is dealt with: configs recorded with tables new to the catalog adopted;
merges a crash left unannounced announced, and the catalog saved with that; every table made due
once (a merge in flight at the crash is planned again); the merges the last run died in counted
against their tables, unless their commit landed; segments whose deleted rows a crash left
unpurged queued again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from compactor.catalog.fold import SegmentCatalog
from compactor.catalog.store import CatalogStore
from compactor.delta.store import TableStore
from compactor.rules.due import Due
from compactor.stream.announcer import Announcer
from compactor.stream.catalog_keeper import CatalogKeeper
from compactor.stream.catalog_timing import TimedCatalogStore
from compactor.stream.due import DueTimes
from compactor.stream.recovery import Unannounced, Unread, recover
from compactor.stream.reporting import MetricsSink
from compactor.stream.table_configs import TableConfigs
from compactor.stream.table_failures import TableFailures

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    """The catalog as start-up found it, before anything is wired to it."""

    catalog: SegmentCatalog
    catalog_store: TimedCatalogStore
    new_tables: list[str]  # in the warehouse, new to the catalog
    unread: Unread  # known tables whose logs are read when first used
    unannounced: Unannounced  # rows in Delta whose event has not come yet


@dataclass(frozen=True)
class Resumed:
    """What the second half works through: the wired handler's collaborators it needs."""

    configs: TableConfigs
    announcer: Announcer
    due: DueTimes
    failures: TableFailures
    keeper: CatalogKeeper


def recover_catalog(
    store: TableStore,
    catalog_store: CatalogStore,
    sink: MetricsSink,
    clock: Callable[[], datetime],
    owns: Callable[[str], bool],
    eager: int,
) -> Recovered:
    """The first half: the catalog read and caught up with the tables a shard `owns`."""
    unannounced = Unannounced(clock)
    timed = TimedCatalogStore(catalog_store, sink)
    catalog, new_tables, unread = recover(store, timed, unannounced, owns, eager)
    return Recovered(catalog, timed, new_tables, unread, unannounced)


def resume(recovered: Recovered, wired: Resumed, store: TableStore, started: datetime) -> None:
    """The second half, once the handler is wired: what the last run left, dealt with."""
    catalog = recovered.catalog
    wired.configs.load_recorded(catalog, recovered.new_tables)
    wired.announcer.announce_unannounced([t for t in catalog.table_names if t not in recovered.unread])
    recovered.catalog_store.save(catalog.take_changes())
    for table in catalog.table_names:  # a merge in flight at a crash is planned again; due times derived
        wired.due.set(table, Due(started, "the job started: every table is attempted once"), started)
    wired.failures.died_during(lambda table, plan_id: _committed(store, catalog, table, plan_id))
    # segments whose deleted rows a crash left unpurged: reported, and queued again
    wired.keeper.recounted([s for table in catalog.table_names for s in catalog.segments(table) if s.deleted])


def _committed(store: TableStore, catalog: SegmentCatalog, table: str, plan_id: str) -> bool:
    """Whether the plan's commit is in the table (one the catch-up folded, or older)."""
    if catalog.was_executed(table, plan_id):
        return True
    try:
        return store.committed_version(table, plan_id) is not None
    except Exception:  # not to be told (the table is gone?): the merge counts as one that died
        log.warning("table %s: could not tell whether plan %s committed", table, plan_id, exc_info=True)
        return False

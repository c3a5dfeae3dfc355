"""Replaced segments' files deleted on each table's schedule (VACUUM), beside the batches.

The first run waits `first_delay` after start, so a job that restarts often
does not list every table's files on each start; then each table runs every
`vacuum.interval` of its config. A failure is logged and tried at the next
interval: deleting old files is never urgent. Like merge attempts, vacuums come
due with time, from a heap of due times, not a scan of the tables.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from compactor.catalog.view import CatalogView
from compactor.delta.store import TableStore, VacuumReport
from compactor.rules.due import Due
from compactor.stream.due import DueTimes
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.table_configs import TableConfigs

log = logging.getLogger(__name__)

FIRST_DELAY = timedelta(minutes=10)


class Janitor:
    """Each table's next VACUUM in a heap (`DueTimes`): a check with nothing due looks at the
    heap's top, whatever the number of tables; a table first seen comes due `first_delay`
    after the start, then every `vacuum.interval` of its config."""

    def __init__(
        self,
        catalog: CatalogView,
        configs: TableConfigs,
        store: TableStore,
        clock: Callable[[], datetime],
        metrics: MetricsSink | None = None,
        first_delay: timedelta = FIRST_DELAY,
    ) -> None:
        self.catalog = catalog
        self.configs = configs
        self.store = store
        self.clock = clock
        self.metrics = metrics or NoMetrics()
        self.first_delay = first_delay
        self._started = clock()
        self.due = DueTimes()
        self._seen: set[str] = set()
        self._count = 0  # tables in the catalog when it was last looked through

    def _sync(self) -> None:
        """Tables new to the catalog join the heap (looked for only when the count changed)."""
        catalog = self.catalog
        if catalog.table_count == self._count:
            return
        self._count = catalog.table_count
        first = max(self.clock(), self._started + self.first_delay)
        for table in catalog.table_names:
            if table not in self._seen:
                self._seen.add(table)
                self.due.set(table, Due(first, "its first VACUUM after the start"), first)

    def run_due(self) -> list[VacuumReport]:
        self._sync()
        reports = []
        for table, _ in self.due.pop_due(self.clock()):
            config = self.configs.for_table(table).vacuum
            now = self.clock()
            self.due.set(table, Due(now + config.interval, "its vacuum interval"), now)
            if not config.enabled:
                continue
            try:
                reports.append(self.store.vacuum(table, config))
            except Exception:  # a failed VACUUM deletes nothing it should not; the next interval retries
                log.exception("table %s: VACUUM failed; tried again in %s", table, config.interval)
                continue
            self.metrics.on_vacuum(table)
            log.info("table %s: files replaced more than %s ago deleted", table, config.retention)
        return reports

    def start(self, every: float = 60.0) -> threading.Event:
        """Check every `every` seconds in a daemon thread; set the returned event to stop it."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every):
                try:
                    self.run_due()
                except Exception:  # the catalog changed under the scan: the next round sees it
                    log.exception("vacuum schedule check failed")

        threading.Thread(target=loop, name="compactor-vacuum", daemon=True).start()
        return stop

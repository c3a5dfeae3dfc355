"""Replaced segments' files deleted on each table's schedule (VACUUM), beside the batches.

The first run waits `first_delay` after start, so a job that restarts often
does not list every table's files on each start; then each table runs every
`vacuum.interval` of its config. A failure is logged and tried at the next
interval: deleting old files is never urgent.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from compactor.delta.store import VacuumReport
from compactor.stream.state import StreamState

log = logging.getLogger(__name__)

FIRST_DELAY = timedelta(minutes=10)


class Janitor:
    def __init__(self, state: StreamState, first_delay: timedelta = FIRST_DELAY) -> None:
        self.state = state
        self.first_delay = first_delay
        self._started = state.clock()
        self._last: dict[str, datetime] = {}

    def due(self) -> list[str]:
        now, state = self.state.clock(), self.state
        found = []
        for table in state.catalog.table_names:
            config = state.configs.for_table(table).vacuum
            last = self._last.get(table, self._started - config.interval + self.first_delay)
            if config.enabled and now >= last + config.interval:
                found.append(table)
        return found

    def run_due(self) -> list[VacuumReport]:
        reports = []
        for table in self.due():
            self._last[table] = self.state.clock()
            config = self.state.configs.for_table(table).vacuum
            try:
                reports.append(self.state.store.vacuum(table, config))
            except Exception:  # a failed VACUUM deletes nothing it should not; the next interval retries
                log.exception("table %s: VACUUM failed; tried again in %s", table, config.interval)
                continue
            self.state.metrics.on_vacuum(table)
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

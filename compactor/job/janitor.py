"""Replaced segments' files deleted on each table's schedule (VACUUM), beside the batches.

Each table is vacuumed every `vacuum.interval` of its config, at a time of that interval of its
own (`vacuum_slot`: a phase from a hash of its name, counted from the epoch), so the tables'
VACUUMs are spread evenly over the interval and fall at the same times whatever the job's
starts: a job that restarts often lists no table's files more often than its interval says.
Nothing runs in the first `first_delay` after a start. Every table's first VACUUM at one moment
(ten minutes after the start, as it was) kept a job beside 5,000 tables vacuuming back to back
for the better part of an hour, at 80% of its two cores. A failure is logged and tried at the
next slot: deleting old files is never urgent. Like merge attempts, vacuums come due with time,
from a heap of due times, not a scan of the tables.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from compactor.catalog.view import CatalogView
from compactor.config.vacuum import VacuumConfig
from compactor.delta.store import TableStore, VacuumReport
from compactor.errors import Rejected
from compactor.rules.due import Due
from compactor.stream.due import DueTimes
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.table_configs import TableConfigs

log = logging.getLogger(__name__)

FIRST_DELAY = timedelta(minutes=10)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # where every table's slots are counted from


def vacuum_slot(table: str, interval: timedelta, not_before: datetime) -> datetime:
    """The first of the table's VACUUM times at or after `not_before`: one every `interval`, at a
    phase of the interval from a hash of the table's name (the same in every process and start;
    CRC-32 spreads names evenly enough)."""
    micro = timedelta(microseconds=1)
    period = max(1, interval // micro)  # whole microseconds: exact, where float seconds round
    phase = zlib.crc32(table.encode("utf-8")) * period >> 32
    since = (not_before - EPOCH) // micro - phase
    return EPOCH + (phase + -(-since // period) * period) * micro


class Janitor:
    """Each table's next VACUUM in a heap (`DueTimes`): a check with nothing due looks at the
    heap's top, whatever the number of tables; a table first seen comes due at its first slot
    (`vacuum_slot`) from `first_delay` after the start on, then at each slot after."""

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
        now = self.clock()
        first = max(now, self._started + self.first_delay)
        for table in catalog.table_names:
            if table not in self._seen:
                self._seen.add(table)
                slot = vacuum_slot(table, self._interval(table), first)
                self.due.set(table, Due(slot, "its first VACUUM slot after the start"), now)

    def _interval(self, table: str) -> timedelta:
        try:
            return self.configs.for_table(table).vacuum.interval
        except Rejected:  # no valid config: its slot as the default's; it is read again when due
            return VacuumConfig().interval

    def run_due(self) -> list[VacuumReport]:
        self._sync()
        reports = []
        for table, _ in self.due.pop_due(self.clock()):
            config = self.configs.for_table(table).vacuum
            now = self.clock()
            after = vacuum_slot(table, config.interval, now + timedelta(microseconds=1))
            self.due.set(table, Due(after, "its next VACUUM slot"), now)
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

"""One line a minute for the operator: what the job did since the last line, and where it stands."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from compactor.stream.job_view import JobView
from compactor.stream.stats import HandlerStats

log = logging.getLogger(__name__)

INTERVAL_S = 60.0


def summary_line(
    before: HandlerStats, after: HandlerStats, seconds: float, segments: int, tables: int, lag: int | None
) -> str:
    """`before` and `after` are the counters at both ends of the interval."""
    return (
        f"last {seconds:.0f}s: {after.events - before.events} events, {after.merges - before.merges} merges, "
        f"{after.failed_merges - before.failed_merges} failed, {after.conflicts - before.conflicts} conflicts lost, "
        f"{after.dead_letters - before.dead_letters} dead letters; "
        f"tracking {segments} segments in {tables} tables, "
        + ("lag unknown" if lag is None else f"{lag} events behind the topic")
    )


class Summary:
    """Logs `summary_line` every `interval` seconds from a daemon thread."""

    def __init__(
        self,
        job: JobView,
        interval: float = INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stats = job.stats  # the counters, read now
        self.catalog = job.catalog
        self.control = job.control
        self.interval = interval
        self.monotonic = monotonic
        self._before = job.stats()
        self._since = monotonic()

    def line(self) -> str:
        now, after = self.monotonic(), self.stats()
        tables = self.catalog.table_names
        segments = sum(len(self.catalog.segments(t)) for t in tables)
        lag = self.control.lag
        text = summary_line(
            self._before, after, now - self._since, segments, len(tables), None if lag is None else int(lag)
        )
        self._before, self._since = after, now
        return text

    def start(self) -> threading.Event:
        """Set the returned event to stop the thread."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.interval):
                log.info("%s", self.line())

        threading.Thread(target=loop, name="summary", daemon=True).start()
        return stop

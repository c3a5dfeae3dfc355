"""The thread that keeps the job moving between micro-batches.

Spark runs a batch only when events arrive. Between them this thread ticks the
handler: when a merge finishes (its result recorded and announced, its slot given to
the next plan waiting) and at least every `every` seconds (what came due with time).
A tick that finds nothing costs a wait on a condition, whatever the number of tables.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from compactor.stream.handler import BatchHandler

log = logging.getLogger(__name__)

TICK_EVERY = 1.0  # seconds between ticks when no merge finishes


class Ticker:
    def __init__(
        self, handler: BatchHandler, every: float = TICK_EVERY, alive: Callable[[], bool] = lambda: True
    ) -> None:
        self.handler = handler
        self.every = every
        self.alive = alive  # e.g. the streaming query is active
        self.stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Ticker:
        self._thread = threading.Thread(target=self._loop, name="compactor-ticker", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.is_set() and self.alive():
            self.handler.merges.wait(self.handler.until_due(self.every))
            if self.stop.is_set():
                return
            try:
                self.handler.tick()
            except Exception:  # Kafka refused, a table's log unreadable: the next tick tries again
                log.exception("tick failed; trying again in %.0fs", self.every)
                self.stop.wait(self.every)

    def close(self, timeout: float = 10.0) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

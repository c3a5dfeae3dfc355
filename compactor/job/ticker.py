"""The threads that keep the job moving between micro-batches.

Spark runs a batch only when events arrive. Beside the query, four threads of the job's own,
each so that one slow step never stops the others:

- the **ticker** ticks the handler when a merge finishes (its result recorded and announced,
  its slot given to the next plan waiting) and at least every `every` seconds (what came due
  with time); a tick that finds nothing costs a wait on a condition, whatever the number of
  tables;
- the **watchdog** cancels merges running past their time bound, every `watch_every` seconds,
  whatever the ticker is doing;
- **upkeep** does the job's background writes (key index snapshots, purges) and the probe of
  other writers, every `every` seconds: a snapshot of hundreds of megabytes, or a purge, may
  take minutes, and neither holds up a tick or the watchdog; now and then it also hands the
  memory the C allocator keeps freed back to the system (`freed_memory`);
- **logs** writes the tables' checkpoints that are due, without the job's lock: the batches and
  the ticker hold it so much under a steady load that a checkpoint waiting for it never came.

Each loop outlives its own failures (logged, tried again after a pause); `running()` says
whether all four are still alive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from compactor.errors import Fenced
from compactor.job import freed_memory
from compactor.job.freed_memory import FreedMemory
from compactor.stream.handler import BatchHandler

log = logging.getLogger(__name__)

TICK_EVERY = 1.0  # seconds between ticks when no merge finishes
WATCH_EVERY = 1.0  # seconds between the watchdog's looks at the merges in flight


class Ticker:
    def __init__(
        self,
        handler: BatchHandler,
        every: float = TICK_EVERY,
        alive: Callable[[], bool] = lambda: True,
        watch_every: float = WATCH_EVERY,
        freed: FreedMemory | None = None,
    ) -> None:
        self.handler = handler
        self.freed = freed or freed_memory.PROCESS
        self.every = every
        self.watch_every = watch_every
        self.alive = alive  # e.g. the streaming query is active
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Ticker:
        handler = self.handler
        loops = (
            ("ticker", self._tick),
            (
                "watchdog",
                lambda: self._every(self.watch_every, "the watchdog's look", handler.merges.cancel_hung),
            ),
            ("upkeep", lambda: self._every(self.every, "upkeep", self._upkeep)),
            ("logs", lambda: self._every(self.every, "log upkeep", handler.keep_logs)),
        )
        for name, loop in loops:
            thread = threading.Thread(target=loop, name=f"compactor-{name}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def running(self) -> bool:
        """Every loop is alive (False once one died, or they were stopped)."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def _go_on(self) -> bool:
        return not self.stop.is_set() and self.alive()

    def _tick(self) -> None:
        while self._go_on():
            self.handler.merges.wait(self.handler.until_due(self.every))
            if self.stop.is_set():
                return
            self._guarded("tick", self.handler.tick, self.every)

    def _upkeep(self) -> None:
        self.handler.upkeep()
        self.freed.give_back()

    def _every(self, period: float, what: str, step: Callable[[], object]) -> None:
        """Run `step` every `period` seconds until stopped (the watchdog, upkeep and logs loops)."""
        while self._go_on():
            self._guarded(what, step, period)
            self.stop.wait(period)

    def _guarded(self, what: str, step: Callable[[], object], pause: float) -> None:
        try:
            step()
        except Fenced:  # the shard was lost: nothing more to do for it here
            log.info("%s: the shard was lost; the job's threads for it stop", what)
            self.stop.set()
        except Exception:  # Kafka refused, a table's log unreadable: the next round tries again
            log.exception("%s failed; trying again in %.0fs", what, pause)
            self.stop.wait(pause)

    def close(self, timeout: float = 10.0) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)

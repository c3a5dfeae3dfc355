"""The shards one job runs: started when the lease gains them, stopped before it gives them up.

The lease's consumer thread reports each change (`ControllerLease.changes`); this loop, on the
job's main thread, starts a gained shard (its handler recovered, its query started) and stops
a revoked one (its query stopped between batches, its merges given a grace to finish and be
announced, its catalog saved) before it marks the change done, which is what lets the lease
hand the shard to another job. A shard revoked before it started never starts: `owned` is
checked first. The job's merge slots are shared by its shards (`inflight.Slots`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Protocol

from compactor.errors import LeaseHeld
from compactor.kafka.lease import ControllerLease

log = logging.getLogger(__name__)

RESTART_FIRST_S = 2.0  # a failed query starts again after this, doubling with each failure in a row
RESTART_MAX_S = 60.0


class RunningShard(Protocol):
    index: int

    def failure(self) -> str | None:
        """Why the shard's query ended on its own (None: it runs)."""

    def stop(self, grace: float, lost: bool = False) -> int:
        """Stop the query, give merges in flight `grace` seconds; the number left running.
        `lost`: the lease is gone: commit nothing more, and do not wait."""


class ShardedJob:
    """Runs what the lease holds until `stopping` is set, through lost sessions (the lease
    rejoins; lost shards stop at once and start again when they come back), until another live
    job holds this one's identity (`LeaseHeld`)."""

    def __init__(
        self,
        lease: ControllerLease,
        start: Callable[[int], RunningShard],
        grace: float,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self.lease = lease
        self.start = start
        self.grace = grace
        self.say = say
        self.running: dict[int, RunningShard] = {}
        self._failures: dict[int, int] = {}  # shard -> its query's failures in a row
        self._retry_at: dict[int, float] = {}  # shard -> when its failed query starts again
        self._started_at: dict[int, float] = {}

    def run(self, stopping: threading.Event, poll: float = 2.0) -> None:
        self.lease.supervised.set()
        try:
            while not stopping.is_set() and not self.lease.fenced.is_set():
                self.apply_changes(poll)
                self._restart_failed()
                if not self.lease.polling():
                    self._lose_all()
                    raise LeaseHeld(
                        "the lease's consumer thread ended on its own: no shard may run without a "
                        "lease; stopped (restart the job)"
                    )
        finally:
            self.stop_all()
        if self.lease.fenced.is_set():
            raise LeaseHeld(f"{self.lease.fenced_why}; stopped so that no shard runs in two jobs")

    def _lose_all(self) -> None:
        """Every shard stops as if its session were lost: nothing more is written for it."""
        for index in sorted(self.running):
            self._give_up(index, lost=True)

    def apply_changes(self, wait: float) -> None:
        """Start what was gained and stop what was revoked, in the order the lease reported."""
        deadline = time.monotonic() + wait
        while True:
            try:
                change = self.lease.changes.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            try:
                if change.gained:
                    self._gain(change.shard)
                else:
                    self._give_up(change.shard, change.lost)
            finally:
                change.done.set()

    def _restart_failed(self) -> None:
        """A shard whose query ended on its own (a broker gone too long, a storage error) is
        stopped and started again, after a back-off that doubles with each failure in a row
        (up to `RESTART_MAX_S`): the job stays up and says why each time."""
        now = time.monotonic()
        for index, shard in list(self.running.items()):
            failure = shard.failure()
            if failure is None:
                if now - self._started_at.get(index, now) > RESTART_MAX_S:
                    self._failures.pop(index, None)  # a while without failing: forgiven
                continue
            failures = self._failures[index] = self._failures.get(index, 0) + 1
            delay = min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** (failures - 1))
            log.error(
                "shard %d: the streaming query failed (%d in a row): %s; starting it again in %.0fs",
                index,
                failures,
                failure,
                delay,
            )
            try:
                self.running.pop(index).stop(0.0)
            except Exception as exc:  # its stop failed too: the shard is gone all the same
                log.error(
                    "shard %d: stopping its failed query failed too: %s: %s", index, type(exc).__name__, exc
                )
            self._retry_at[index] = now + delay
        for index, at in list(self._retry_at.items()):
            if at <= now:
                del self._retry_at[index]
                try:
                    self._gain(index)
                except Exception as exc:  # its recovery failed too (the store still out of reach)
                    failures = self._failures[index] = self._failures.get(index, 0) + 1
                    delay = min(RESTART_MAX_S, RESTART_FIRST_S * 2 ** (failures - 1))
                    log.error(
                        "shard %d: starting it again failed (%d in a row): %s: %s; trying again in %.0fs",
                        index,
                        failures,
                        type(exc).__name__,
                        exc,
                        delay,
                    )
                    self._retry_at[index] = now + delay

    def _gain(self, index: int) -> None:
        if index in self.running or index not in self.lease.owned:  # revoked before it started
            return
        started = time.monotonic()
        self.running[index] = self.start(index)
        self._started_at[index] = time.monotonic()
        self.say(f"shard {index}: running (started in {time.monotonic() - started:.1f}s)")

    def _give_up(self, index: int, lost: bool = False) -> None:
        self._retry_at.pop(index, None)
        shard = self.running.pop(index, None)
        if shard is None:
            return
        left = shard.stop(self.grace, lost)
        note = f"; {left} merge(s) left running are planned again by its next holder" if left else ""
        if lost:
            self.say(
                f"shard {index}: stopped, its session lost; it starts again when the group gives it back{note}"
            )
        else:
            self.say(f"shard {index}: stopped and handed on{note}")

    def stop_all(self) -> None:
        for index in sorted(self.running):
            left = self.running[index].stop(self.grace)
            if left:
                self.say(
                    f"shard {index}: {left} merge(s) still running were left; planned again at the next start"
                )
        self.running.clear()

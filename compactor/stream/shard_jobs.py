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

from compactor.errors import CompactorError, LeaseHeld
from compactor.kafka.lease import ControllerLease

log = logging.getLogger(__name__)


class RunningShard(Protocol):
    index: int

    def failure(self) -> str | None:
        """Why the shard's query ended on its own (None: it runs)."""

    def stop(self, grace: float) -> int:
        """Stop the query, give merges in flight `grace` seconds; the number left running."""


class ShardedJob:
    """Runs what the lease holds until `stopping` is set or the lease is lost."""

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

    def run(self, stopping: threading.Event, poll: float = 2.0) -> None:
        self.lease.supervised.set()
        try:
            while not stopping.is_set() and not self.lease.lost.is_set():
                self.apply_changes(poll)
                for shard in list(self.running.values()):
                    failure = shard.failure()
                    if failure is not None:
                        raise CompactorError(f"shard {shard.index}: the streaming query failed: {failure}")
        finally:
            self.stop_all()
        if self.lease.lost.is_set():
            raise LeaseHeld(
                f"lost the controller lease ({self.lease.group}); stopped so that no shard runs in two jobs"
            )

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
                    self._give_up(change.shard)
            finally:
                change.done.set()

    def _gain(self, index: int) -> None:
        if index in self.running or index not in self.lease.owned:  # revoked before it started
            return
        started = time.monotonic()
        self.running[index] = self.start(index)
        self.say(f"shard {index}: running (started in {time.monotonic() - started:.1f}s)")

    def _give_up(self, index: int) -> None:
        shard = self.running.pop(index, None)
        if shard is None:
            return
        left = shard.stop(self.grace)
        note = f"; {left} merge(s) left running are planned again by its next holder" if left else ""
        self.say(f"shard {index}: stopped and handed on{note}")

    def stop_all(self) -> None:
        for index in sorted(self.running):
            left = self.running[index].stop(self.grace)
            if left:
                self.say(
                    f"shard {index}: {left} merge(s) still running were left; planned again at the next start"
                )
        self.running.clear()

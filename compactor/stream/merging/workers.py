"""The threads merges run on, and what a merge hands back from one.

Workers only commit; what they found (`Finished`) is handed back to the one thread
that holds the job's state, which records and announces it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from compactor.domain.plans import Commit, MergePlan


@dataclass(frozen=True, slots=True)
class Finished:
    """A plan as its worker left it: committed, or why not."""

    plan: MergePlan
    commit: Commit | None = None
    stale: str | None = None  # its inputs changed under it: re-plan
    skipped: str | None = None  # not tried (no room for its output)
    failure: BaseException | None = None
    conflicts: int = 0  # commit races lost before the end

    @property
    def version(self) -> int | None:
        return self.commit.version if self.commit is not None else None


class Workers(Protocol):
    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


class InlineWorkers:
    """Runs each merge at once on the calling thread: unit tests, and a batch that must wait."""

    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]:
        future: Future[Finished] = Future()
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed back as the plan's failure, as a worker's would be
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def thread_workers(limit: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=limit, thread_name_prefix="compactor-merge")


class SharedWorkers:
    """One shard's share of the job's worker threads: stopping it cancels and waits for this
    shard's merges only, the pool goes on for the others."""

    def __init__(self, pool: Workers) -> None:
        self.pool = pool
        self._futures: set[Future[Finished]] = set()
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]:
        future = self.pool.submit(fn)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[Finished]) -> None:
        with self._lock:
            self._futures.discard(future)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            mine = list(self._futures)
        if cancel_futures:
            for future in mine:
                future.cancel()
        if wait:
            for future in mine:
                if not future.cancelled():
                    future.exception()  # waits; the outcome was reported to its InFlight

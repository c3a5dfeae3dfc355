"""The threads merges run on, and what a merge hands back from one.

Workers only commit; what they found (`Finished`) is handed back to the one thread
that holds the job's state, which records and announces it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from compactor.domain.plans import Commit, MergePlan

log = logging.getLogger(__name__)


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

    def write_off(self, future: Future[Finished], /) -> None:
        """The merge behind `future` was abandoned (hung): its thread may never come back, so
        another takes its place."""
        ...

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

    def write_off(self, future: Future[Finished], /) -> None:
        pass

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


_Task = tuple[Future[Finished], Callable[[], Finished]]


class MergeThreads:
    """The job's merge threads: `size` of them take merges in turn, and one written off (its
    merge hung in a call nothing can interrupt: the driver's Arrow path, a LogStore write) is
    replaced at once, so the pool never has fewer live threads than slots. A hung thread that
    comes back after all ends instead of taking more work: the pool shrinks back to `size`.

    A `ThreadPoolExecutor` cannot do this: a hung thread holds its place forever, and the merges
    queued behind it never start (and, timed from their submission, were cancelled as hung)."""

    def __init__(self, size: int, name: str = "compactor-merge") -> None:
        self.size = size
        self.name = name
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: dict[threading.Thread, Future[Finished]] = {}
        self._threads: set[threading.Thread] = set()  # live, written off or not
        self._written_off: set[threading.Thread] = set()
        self._started = 0
        self._shut = False
        for _ in range(size):
            self._spawn()

    def submit(self, fn: Callable[[], Finished], /) -> Future[Finished]:
        future: Future[Finished] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("the merge threads were shut down")
            self._queue.put((future, fn))
        return future

    def write_off(self, future: Future[Finished], /) -> None:
        with self._lock:
            thread = next((t for t, f in self._running.items() if f is future), None)
            if thread is None or thread in self._written_off or self._shut:
                return
            self._written_off.add(thread)
            log.warning(
                "merge thread %s written off (its merge hung); a new one takes its place", thread.name
            )
            self._spawn()

    def __enter__(self) -> MergeThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=True)

    def live(self) -> int:
        """Threads taking work: the pool's size, whatever hung."""
        with self._lock:
            return len(self._threads - self._written_off)

    def written_off(self) -> int:
        """Threads of hung merges that have not come back yet."""
        with self._lock:
            return len(self._written_off)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut = True
            threads = list(self._threads - self._written_off)
        if cancel_futures:
            while True:
                try:
                    task = self._queue.get_nowait()
                except queue.Empty:
                    break
                if task is not None:
                    task[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def _spawn(self) -> None:
        """A new worker thread (called under the lock)."""
        self._started += 1
        thread = threading.Thread(target=self._work, name=f"{self.name}_{self._started}", daemon=True)
        self._threads.add(thread)
        thread.start()

    def _work(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                task = self._queue.get()
                if task is None:
                    return
                future, fn = task
                if not future.set_running_or_notify_cancel():
                    continue
                with self._lock:
                    self._running[me] = future
                try:
                    result = fn()
                except BaseException as exc:  # handed back as the plan's failure
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                with self._lock:
                    del self._running[me]
                    if me in self._written_off:  # another took this thread's place
                        return
        finally:
            with self._lock:
                self._threads.discard(me)
                self._written_off.discard(me)


def thread_workers(limit: int) -> MergeThreads:
    return MergeThreads(limit)


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

    def write_off(self, future: Future[Finished], /) -> None:
        self.pool.write_off(future)

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

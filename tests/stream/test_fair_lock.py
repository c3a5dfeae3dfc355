"""The handler's lock goes to the thread that asked first: a thread that releases and asks again
at once (a batch, the ticker) does not starve one that waits (the upkeep: issue 49's years run)."""

from __future__ import annotations

import threading
import time

import pytest

from compactor.stream.fair_lock import FairRLock


def wait_until_queued(lock: FairRLock, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(lock._waiting) < count:
        assert time.monotonic() < deadline, "the other thread never asked for the lock"
        time.sleep(0.001)


def test_a_thread_that_asks_again_at_once_waits_behind_the_one_already_waiting() -> None:
    lock, order = FairRLock(), []
    lock.acquire()
    waiter = threading.Thread(target=lambda: (lock.acquire(), order.append("upkeep"), lock.release()))
    waiter.start()
    wait_until_queued(lock, 1)
    lock.release()
    assert lock.acquire(blocking=False) is False, "the waiting thread's turn comes first"
    with lock:
        order.append("batch")
    waiter.join()
    assert order == ["upkeep", "batch"]


def test_it_is_reentrant_and_waits_are_bounded() -> None:
    lock = FairRLock()
    with lock, lock:  # the holder takes it again
        outcome: list[bool] = []
        other = threading.Thread(target=lambda: outcome.append(lock.acquire(timeout=0.05)))
        other.start()
        other.join()
        assert outcome == [False], "held by another thread: the timeout ends the wait"
        assert not lock._waiting, "a wait that timed out leaves the queue"
    assert lock.acquire(blocking=False) is True
    lock.release()


def test_releasing_a_lock_not_held_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="does not hold"):
        FairRLock().release()

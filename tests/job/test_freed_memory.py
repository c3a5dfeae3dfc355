"""The freed memory glibc keeps is handed back: the process's resident size falls after a trim
of fragmented free blocks, at most once per interval, and the upkeep thread does it."""

from __future__ import annotations

import ctypes
import os

import pytest

from compactor.job.freed_memory import FreedMemory
from compactor.job.ticker import Ticker
from tests.helpers.harness import Harness
from tests.stream.test_concurrency import until

MiB = 1 << 20


def resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not FreedMemory().supported, reason="glibc's malloc_trim only")
def test_fragmented_free_blocks_are_given_back_to_the_system() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    block = 16 * 1024  # under glibc's mmap threshold: these live in an arena
    blocks = [libc.malloc(block) for _ in range(12_800)]  # 200 MiB
    for address in blocks:
        libc.memset(address, 1, block)  # touched, so resident
    kept = blocks[::16]  # one block in 16 stays: the holes between cannot go back by free()
    staying = set(kept)
    for address in blocks:
        if address not in staying:
            libc.free(address)
    try:
        before = resident()
        assert FreedMemory().give_back(force=True)
        given_back = before - resident()
        assert given_back > 150 * MiB, f"only {given_back / MiB:.0f} MiB given back"
    finally:
        for address in kept:
            libc.free(address)


def test_a_trim_comes_at_most_once_per_interval() -> None:
    now = [0.0]
    trims: list[int] = []
    freed = FreedMemory(every=60, clock=lambda: now[0], trim=lambda pad: trims.append(pad) or 1)
    assert not freed.give_back(), "nothing given back in the first interval"
    now[0] = 60
    assert freed.give_back()
    assert not freed.give_back()
    now[0] = 119
    assert not freed.give_back()
    assert freed.give_back(force=True)
    now[0] = 178
    assert not freed.give_back(), "a forced trim starts the interval again"
    now[0] = 179
    assert freed.give_back()
    assert trims == [0, 0, 0]


def test_the_upkeep_thread_gives_freed_memory_back(harness: Harness) -> None:
    trims: list[int] = []
    freed = FreedMemory(every=0.0, trim=lambda pad: trims.append(pad) or 1)
    ticker = Ticker(harness.handler({"defaults": {"rules": []}}), every=0.05, watch_every=0.05, freed=freed)
    ticker.start()
    try:
        until(lambda: len(trims) >= 2)
    finally:
        ticker.close(timeout=5)

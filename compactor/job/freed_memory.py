"""Freed memory the C allocator keeps, handed back to the system now and then.

glibc keeps the blocks a long-running driver frees in its arenas for reuse; under a mixed load
(Arrow buffers, py4j strings, parsed Delta commits) the holes do not line up with later requests,
so the kept memory grows with time while the job's live memory stays flat. The third full
`bench/years.py` run saw exactly that: live blocks +0.3 MiB per 1,000 merges, kept free blocks
+6.6. `malloc_trim(0)` gives every whole free page in every arena back to the kernel
(`madvise(MADV_DONTNEED)`), so the process's resident size follows what it uses.

The allocator is the process's, whatever the number of shards: one trim per `TRIM_EVERY_S` in the
whole process, taken by whichever shard's upkeep comes first. Off glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_EVERY_S = 120.0  # a trim walks the arenas under their locks: a few ms at a driver's size


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        call = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    call.argtypes = [ctypes.c_size_t]
    call.restype = ctypes.c_int
    return call


class FreedMemory:
    """Gives freed memory back at most once every `every` seconds."""

    def __init__(
        self,
        every: float = TRIM_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        trim: Callable[[int], int] | None = None,  # glibc's malloc_trim unless given
    ) -> None:
        self.every = every
        self.clock = clock
        self._trim = trim or _malloc_trim()
        self._lock = threading.Lock()
        self._next = clock() + every  # nothing to give back in a job's first minutes

    @property
    def supported(self) -> bool:
        return self._trim is not None

    def give_back(self, force: bool = False) -> bool:
        """Trim if due (or `force`); True when the allocator handed memory back."""
        if self._trim is None:
            return False
        with self._lock:
            now = self.clock()
            if not force and now < self._next:
                return False
            self._next = now + self.every
            began = time.perf_counter()
            released = bool(self._trim(0))
        log.debug("freed memory given back: %s in %.1f ms", released, (time.perf_counter() - began) * 1e3)
        return released


PROCESS = FreedMemory()  # the allocator is one per process, so is its trimmer

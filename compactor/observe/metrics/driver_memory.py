"""Where the driver's Python memory is held, read when scraped: the C allocator's live blocks
and the freed ones it keeps, Arrow's pool, and the blocks Python's own allocator has handed out
(its small objects live in arenas the C allocator's figures do not see).

A driver's resident size that grows over weeks is either something kept (live blocks grow) or
the allocator's fragmentation (kept free blocks grow); the process's size alone cannot tell the
two apart, and the remedies differ (a bound in the code, or `MALLOC_ARENA_MAX`).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator

from prometheus_client.core import Metric

from compactor.observe.metrics.declared import gauge_family


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (glibc 2.33 and later), summed over all its arenas."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _mallinfo2() -> _MallInfo2 | None:
    try:
        call = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc, or one older than 2.33
        return None
    call.restype = _MallInfo2
    return call()  # type: ignore[no-any-return]


def driver_memory() -> dict[str, int]:
    """Bytes by kind; a kind the platform cannot tell is left out."""
    found: dict[str, int] = {}
    info = _mallinfo2()
    if info is not None:
        found["malloc_in_use"] = info.uordblks + info.hblkhd  # small blocks in use, and mmapped ones
        found["malloc_free"] = info.fordblks
    arrow = sys.modules.get("pyarrow")  # imported by whoever needs it: not loaded for a metric
    if arrow is not None:
        found["arrow_pool"] = int(arrow.total_allocated_bytes())
    return found


def driver_memory_families() -> Iterator[Metric]:
    family = gauge_family("compactor_driver_memory_bytes")
    for kind, size in driver_memory().items():
        family.add_metric([kind], size)
    yield family
    # small objects live in Python's own arenas, which the C allocator's figures do not see
    blocks = gauge_family("compactor_driver_python_blocks")
    blocks.add_metric([], sys.getallocatedblocks())
    yield blocks

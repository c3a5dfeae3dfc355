"""Upsert tables at scale (issue #45): what the key index costs the driver, per key and per load.

No Spark: the index is fed `KeyRow`s as `store.key_rows` hands them over (random 64-bit key
and row hashes, as xxhash64 gives; the comparison value a long).
- Driver memory per key: a `KeyIndex` built through `absorb` in loads of a million new keys
  (10M keys; --quick 1M). The figure is the growth of the process's resident set from just
  before the first load to just after the last, divided by the keys; each load's rows are
  made just before it and dropped after it, as the stream's are, and glibc is asked to hand
  freed heap back (`malloc_trim`) before each reading. The bytes of the index's own columns
  are printed beside it.
- Index update per load: one `absorb` of a load of 100k keys (--quick 10k), half of them keys
  the table has (a random value: some win, some lose), half new, into a table of 1M and of
  10M keys (--quick 100k and 1M), several loads each; the mean (which carries the amortised
  merges of the index's sorted runs) and the median. The target is the ratio of the two
  means: the cost of the load, not of the table.
- Restart to the first upsert attempt: not measured yet (the snapshot is part 2 of the issue).

Prints every figure beside its target; a full run saves bench/results/upsert_scale.json.
Run: .venv/bin/python bench/upsert_scale.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from itertools import repeat
from typing import Any

import numpy as np
import psutil
from _common import machine_info, save_results

from compactor.catalog.key_index import KeyIndex, KeyRow
from compactor.domain.segments import Segment, TimeRange

T0 = datetime(2024, 1, 1, tzinfo=UTC)
BUILD_LOAD = 1_000_000  # keys per load while a table is built
TARGET_BYTES_PER_KEY = 40
TARGET_RATIO = 1.5


class Loads:
    """Segments and their rows, loaded one after another (each a second later)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def segment(self, records: int) -> Segment:
        self.count += 1
        when = T0 + timedelta(seconds=self.count)
        return Segment(f"l{self.count}", "t", TimeRange(T0, T0 + timedelta(hours=1)), when, records=records)

    def hashes(self, n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        return self.rng.integers(np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max, n, dtype=np.int64)

    def rows(self, segment: Segment, keys: np.ndarray[Any, np.dtype[np.int64]]) -> list[KeyRow]:
        values = self.rng.integers(0, 1_000_000, len(keys)).tolist()
        hashes = self.hashes(len(keys)).tolist()
        return list(map(KeyRow, keys.tolist(), values, hashes, repeat(segment.id)))


def rss() -> int:
    """The resident set, after a collection and with freed heap handed back where glibc can."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return int(psutil.Process().memory_info().rss)


def build(
    index: KeyIndex, loads: Loads, keys: int
) -> tuple[list[np.ndarray[Any, np.dtype[np.int64]]], float]:
    """Absorb `keys` new keys in loads of `BUILD_LOAD`; the keys, as loaded, and absorb's seconds."""
    made, seconds = [], 0.0
    for start in range(0, keys, BUILD_LOAD):
        batch = loads.hashes(min(BUILD_LOAD, keys - start))
        segment = loads.segment(len(batch))
        rows = loads.rows(segment, batch)
        began = time.perf_counter()
        index.absorb([segment], rows)
        seconds += time.perf_counter() - began
        del rows
        made.append(batch)
    return made, seconds


def memory_per_key(keys: int) -> dict[str, Any]:
    loads, index = Loads(seed=1), KeyIndex()
    warm = loads.rows(loads.segment(BUILD_LOAD), loads.hashes(min(BUILD_LOAD, keys)))  # the allocator
    del warm
    before = rss()
    made, seconds = build(index, loads, keys)
    del made
    grown = rss() - before
    assert len(index) == keys, "random 64-bit keys: no two alike at this size"
    return {
        "keys": keys,
        "rss_growth_bytes": grown,
        "bytes_per_key": grown / keys,
        "column_bytes_per_key": index.nbytes / keys,
        "compact": index.compact,
        "absorb_seconds": seconds,
        "absorb_rows_per_second": keys / seconds,
    }


def update_time(table: int, load: int, repeats: int) -> dict[str, Any]:
    """Loads of `load` keys (half known, half new) into a table of `table` keys: absorb's time."""
    loads, index = Loads(seed=2), KeyIndex()
    known = np.concatenate(build(index, loads, table)[0])
    times = []
    for _ in range(repeats):
        old = loads.rng.choice(known, load // 2, replace=False)
        segment = loads.segment(load)
        rows = loads.rows(segment, np.concatenate([old, loads.hashes(load - len(old))]))
        began = time.perf_counter()
        index.absorb([segment], rows)
        times.append(time.perf_counter() - began)
        del rows
    return {
        "table_keys": table,
        "load_keys": load,
        "loads": repeats,
        "mean_seconds": statistics.fmean(times),
        "median_seconds": statistics.median(times),
        "max_seconds": max(times),
        "keys_after": len(index),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1M keys; loads of 10k into 100k and 1M")
    parser.add_argument("--keys", type=int, help="keys for the memory figure (10M; --quick 1M)")
    parser.add_argument("--tables", type=int, nargs=2, help="the two table sizes of the update figure")
    parser.add_argument("--load", type=int, help="keys per load of the update figure")
    parser.add_argument("--repeats", type=int, default=10, help="loads timed per table size")
    args = parser.parse_args()
    keys = args.keys or (1_000_000 if args.quick else 10_000_000)
    small, large = args.tables or ((100_000, 1_000_000) if args.quick else (1_000_000, 10_000_000))
    load = args.load or (10_000 if args.quick else 100_000)
    info = machine_info()
    print(f"machine: {info['cpus']} CPUs, {info['cpu_model']}, {info['memory_gib']} GiB, pid {os.getpid()}")

    memory = memory_per_key(keys)
    print(
        f"driver bytes per key: {memory['bytes_per_key']:.1f}   (target <= {TARGET_BYTES_PER_KEY}; "
        f"RSS growth at {keys:,} keys; the index's columns: {memory['column_bytes_per_key']:.1f} B/key; "
        f"absorbed at {memory['absorb_rows_per_second'] / 1e6:.2f}M rows/s)"
    )
    updates = [update_time(size, load, args.repeats) for size in (small, large)]
    for u in updates:
        print(
            f"index update, a load of {load:,} keys into {u['table_keys']:,}: "
            f"mean {1000 * u['mean_seconds']:.1f} ms, median {1000 * u['median_seconds']:.1f} ms, "
            f"max {1000 * u['max_seconds']:.1f} ms ({u['loads']} loads)"
        )
    ratio = updates[1]["mean_seconds"] / updates[0]["mean_seconds"]
    print(
        f"index update ratio {large // small}x the keys: {ratio:.2f}x   (target <= {TARGET_RATIO}x; "
        f"medians {updates[1]['median_seconds'] / updates[0]['median_seconds']:.2f}x)"
    )
    print("restart to first attempt: not measured yet (the index's snapshot: issue #45 part 2)")
    if args.keys or args.tables or args.load:
        print("custom sizes: results not saved")
        return
    save_results(
        "upsert_scale",
        args.quick,
        {
            "memory": memory,
            "updates": updates,
            "update_ratio": ratio,
            "targets": {"bytes_per_key": TARGET_BYTES_PER_KEY, "update_ratio": TARGET_RATIO},
            "machine": info,
        },
    )


if __name__ == "__main__":
    main()

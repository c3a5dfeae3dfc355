"""Upsert tables at scale: what the key index costs the driver, per key and per load,
and what a restart costs an upsert table.

The first two figures need no Spark: the index is fed `KeyRow`s as `store.key_rows` hands them
over (random 64-bit key and row hashes, as xxhash64 gives; the comparison value a long).
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
- Restart to the first upsert attempt (real Spark and Delta; 1M and 10M keys, --quick 200k):
  a table in four loads, a first job's index (the whole table read, timed as the cost a restart
  paid before snapshots) and its snapshot saved; a load of 100k keys (--quick 10k), each
  superseding one of the first load's; then a restarted job's first upsert attempt, timed: the snapshot taken
  back, the merges since followed, the new load's keys read by Spark and the rules evaluated.
  Then another writer deletes half the new load's rows in place, and the index's catch-up is
  timed against the whole-table read: it reads that load again, and the other rows of its keys.

Prints every figure, then each target met or missed; a full run saves bench/results/upsert_scale.json.
Run: .venv/bin/python bench/upsert_scale.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from compactor.catalog.key_index import KeyIndex, KeyRow
from compactor.domain.clock import now_utc
from compactor.domain.segments import Segment, TimeRange
from harness.report import machine_info, save_results
from harness.spark_rows import spark_quiet
from harness.targets import Target, judge

T0 = datetime(2024, 1, 1, tzinfo=UTC)
BUILD_LOAD = 1_000_000  # keys per load while a table is built
TARGETS = (
    Target("bytes_per_key", "driver bytes per key of the index", 40, unit=" B"),
    Target(
        "update_ratio", "a load's index update in a table of 10x the keys / in the smaller", 1.5, unit="x"
    ),
    Target("restart_to_first_attempt_s", "restart to the first attempt at the largest table", 10, unit=" s"),
    Target("restart_ratio", "restart at the largest table / at the smallest", 2, unit="x"),
)


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


def restart_time(keys: int, load: int) -> dict[str, Any]:
    """On real Spark and Delta: a table of `keys` keys in four loads; a first job's key index
    (the whole table read) and its snapshot; a load of `load` keys, each superseding one of the
    first load's; then a
    restarted job's first upsert attempt: the snapshot taken back, the merges since followed,
    the new load's keys read, and the table's rules evaluated with its counts."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from compactor.catalog.fold import SegmentCatalog
    from compactor.config.layout import UpsertConfig
    from compactor.config.loading import load_config
    from compactor.delta.paths import table_uri
    from compactor.delta.spark_store import SparkTableStore
    from compactor.delta.table_ops.writes import write_segment
    from compactor.rules.engine import evaluate
    from compactor.spark.session import build_spark
    from compactor.stream.key_indexes import KeyIndexes

    table, parts = "accounts", 4
    upsert = {"primary_key": ["account"], "comparison_column": "version"}
    config = load_config({"tables": {table: {"upsert": upsert, "rules": [{"rule": "upsert_compaction"}]}}})
    settings, key_config = config.for_table(table), UpsertConfig.model_validate(upsert)
    work = Path(tempfile.mkdtemp(prefix="bench-upsert-"))
    spark = build_spark("bench-upsert-scale", master="local[2]", locations=(str(work),))
    try:
        spark_quiet(spark)
        store = SparkTableStore(spark, work)
        first = datetime(2024, 5, 1, tzinfo=UTC)

        def write(n: int, start: int, count: int, version: int) -> None:
            rows = spark.range(start, start + count).select(
                F.col("id").alias("account"), F.lit(version).alias("version")
            )
            hour = first + timedelta(hours=n)
            segment = Segment(f"a{n}", table, TimeRange(hour, hour + timedelta(hours=1)), hour)
            write_segment(spark, work, segment, rows)

        began = time.perf_counter()
        for n in range(parts):
            write(n, n * (keys // parts), keys // parts, 1)
        written = time.perf_counter() - began

        def catalog() -> SegmentCatalog:
            found = SegmentCatalog.from_commits({table: store.history(table)})
            found.advance(table, store.latest_version(table))
            return found

        job = KeyIndexes(catalog(), store)
        began = time.perf_counter()
        job.invalid_counts(table, key_config)
        whole = time.perf_counter() - began
        (snapshot,) = job.snapshots_due(force=True)
        began = time.perf_counter()
        store.save_key_index(snapshot.table, snapshot.version, snapshot.taken.write, snapshot.taken.keys)
        saved = time.perf_counter() - began
        write(parts, 0, load, 2)  # after the snapshot: half its keys supersede a0's

        store = SparkTableStore(spark, work)  # a new process's: no log read yet
        restarted_catalog = catalog()
        restarted = KeyIndexes(restarted_catalog, store)
        began = time.perf_counter()
        counts = restarted.invalid_counts(table, key_config)
        evaluation = evaluate(
            table,
            restarted_catalog.segments(table),
            settings,
            now_utc(),
            explain=False,
            invalid_counts=counts,
        )
        restart = time.perf_counter() - began
        assert restarted.restored == 1 and restarted.rebuilds == 0, "taken back from the snapshot"
        assert counts.get("a0") == load, counts

        # another writer deletes half the late load's rows in place: a0's rows of those accounts
        # are the latest again, and the index reads again only the load and those keys' rows
        DeltaTable.forPath(spark, table_uri(work, table)).delete(
            f"segment_id = 'a{parts}' AND account % 2 = 0"
        )
        restarted_catalog.recount(table, store.row_counts(table))  # as the job's probe of other writers does
        began = time.perf_counter()
        counts = restarted.invalid_counts(table, key_config)
        reread = time.perf_counter() - began
        assert restarted.rereads == 1 and restarted.rebuilds == 0, "read again where it happened"
        assert counts.get("a0") == load - load // 2, counts
        return {
            "table_keys": keys,
            "load_keys": load,
            "write_seconds": written,
            "whole_table_read_seconds": whole,
            "snapshot_bytes": (store.key_indexes.describe(table) or {}).get("bytes"),
            "snapshot_save_seconds": saved,
            "restart_to_first_attempt_seconds": restart,
            "plans": len(evaluation.plans),
            "foreign_delete_reread_seconds": reread,
        }
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


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
        f"driver bytes per key: {memory['bytes_per_key']:.1f}   ("
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
        f"index update ratio {large // small}x the keys: {ratio:.2f}x   ("
        f"medians {updates[1]['median_seconds'] / updates[0]['median_seconds']:.2f}x)"
    )
    restart_sizes = (200_000,) if args.quick else (1_000_000, 10_000_000)
    restarts = [restart_time(size, load) for size in restart_sizes]
    for r in restarts:
        print(
            f"table of {r['table_keys']:,} keys: whole-table read {r['whole_table_read_seconds']:.1f} s (the index "
            f"built from nothing, as before snapshots); snapshot {r['snapshot_bytes'] / 2**20:.1f} MiB, "
            f"saved in {r['snapshot_save_seconds']:.2f} s"
        )
    for r in restarts:
        print(
            f"table of {r['table_keys']:,} keys, another writer deletes half the rows of the newest load: "
            f"read again in {r['foreign_delete_reread_seconds']:.1f} s, "
            f"{r['foreign_delete_reread_seconds'] / r['whole_table_read_seconds']:.2f}x the whole-table read "
            f"(that load, and the other rows of its {r['load_keys']:,} keys)"
        )
    last = restarts[-1]
    print(
        f"restart to first attempt: {last['restart_to_first_attempt_seconds']:.1f} s   (at "
        f"{last['table_keys']:,} keys: the snapshot taken back, "
        f"a load of {last['load_keys']:,} keys read, the rules evaluated)"
    )
    restart_ratio = None
    if len(restarts) > 1:
        restart_ratio = (
            last["restart_to_first_attempt_seconds"] / restarts[0]["restart_to_first_attempt_seconds"]
        )
        print(
            f"restart ratio, {last['table_keys']:,} against {restarts[0]['table_keys']:,} keys: "
            f"{restart_ratio:.2f}x"
        )
    figures = {
        "bytes_per_key": memory["bytes_per_key"],
        "update_ratio": ratio,
        "restart_to_first_attempt_s": last["restart_to_first_attempt_seconds"],
        "restart_ratio": restart_ratio,
    }
    verdicts = judge(TARGETS, figures)
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
            "restarts": restarts,
            "restart_ratio": restart_ratio,
            "verdicts": verdicts,
            "machine": info,
        },
    )


if __name__ == "__main__":
    main()

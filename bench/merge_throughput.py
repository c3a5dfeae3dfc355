"""Merge throughput: our executor (one MergePlan over every segment) against Delta's OPTIMIZE.

One Delta table of N small segments is written partitioned by `segment_id`, as
the project writes tables (each segment split into a few small files, as a
parallel load leaves it), and copied with `shutil.copytree`:

- pair 1, both partitioned by segment_id:
  copy A is compacted by `compactor.delta_executor.execute_merge` with one plan over
  all segments (`make_plan(..., rule="bench")`), copy B by
  `DeltaTable.optimize().executeCompaction()`. OPTIMIZE bin-packs *within* each
  partition, so on this table it only joins each segment's own files (N partitions
  stay N files): it does different, smaller-grained work than our merge.
- pair 2, the fairer variant: the same rows written WITHOUT partitioning (a plain
  table with a segment_id column), where OPTIMIZE bin-packs the whole table, against
  our executor on a fresh partitioned copy.

Reported per run: input MB/s (input bytes / wall seconds, MB = 2^20 bytes), files
before and after (`inputFiles()` of the snapshot), peak RSS of the driver tree
(Python + the JVM it starts, sampled with psutil), and ours/OPTIMIZE throughput
ratios. Every table is checked to hold the same row count and order-independent
checksum (sum of xxhash64 of every column but segment_id, as decimal(38,0)).

Run: .venv/bin/python bench/merge_throughput.py [--quick] [--segments N --rows R]
Saves bench/results/merge_throughput[_quick].json.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from _common import MIB, PeakRss, machine_info, print_table, save_results, segment_rows, spark_quiet
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.delta_executor import SEGMENT_COLUMN, TARGET_FILE_BYTES, execute_merge, table_path
from compactor.domain import Segment, TimeRange, make_plan
from compactor.spark_session import build_spark

START = datetime(2024, 1, 1, tzinfo=UTC)
RULE = "bench"


def write_table(df: DataFrame, path: Path, partitioned: bool) -> None:
    writer = df.write.format("delta").mode("errorifexists")
    if partitioned:
        writer = writer.partitionBy(SEGMENT_COLUMN)
    writer.save(str(path))


def local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


def snapshot_files(spark: SparkSession, path: Path) -> list[str]:
    """The data files of the current snapshot (Delta's add actions)."""
    return [local_path(f) for f in spark.read.format("delta").load(str(path)).inputFiles()]


def files_and_bytes(spark: SparkSession, path: Path) -> tuple[int, int]:
    files = snapshot_files(spark, path)
    return len(files), sum(os.path.getsize(f) for f in files)


def checksum(spark: SparkSession, path: Path) -> tuple[int, int]:
    """(rows, sum of xxhash64 of every column except segment_id, as decimal(38,0))."""
    df = spark.read.format("delta").load(str(path))
    cols = sorted(c for c in df.columns if c != SEGMENT_COLUMN)
    row = (
        df.select(F.xxhash64(*cols).alias("h"))
        .agg(F.count("*").alias("n"), F.sum(F.col("h").cast("decimal(38,0)")).alias("s"))
        .first()
    )
    assert row is not None
    return int(row["n"]), int(row["s"] or 0)


def segments_of(spark: SparkSession, path: Path, table: str, rows: int) -> list[Segment]:
    """The table's segments as the catalog would hold them (bytes from their files)."""
    sizes: dict[str, int] = {}
    for f in snapshot_files(spark, path):
        part = next(p for p in Path(f).parts if p.startswith(f"{SEGMENT_COLUMN}="))
        sid = part.split("=", 1)[1]
        sizes[sid] = sizes.get(sid, 0) + os.path.getsize(f)
    out = []
    for sid in sorted(sizes):
        index = int(sid.rsplit("-", 1)[1])
        start = START + timedelta(hours=index)
        out.append(
            Segment(
                sid,
                table,
                TimeRange(start, start + timedelta(hours=1)),
                loaded_at=start + timedelta(hours=1),
                records=rows,
                bytes=sizes[sid],
            )
        )
    return out


def timed(work: Callable[[], Any]) -> tuple[float, dict[str, Any], Any]:
    """(seconds, RSS figures in MiB, result) of `work()`."""
    with PeakRss() as rss:
        before = rss.peak_mib
        began = time.perf_counter()
        result = work()
        seconds = time.perf_counter() - began
    memory = {
        "rss_before_mib": before,
        "peak_rss_mib": rss.peak_mib,
        "peak_by_process_mib": rss.breakdown_mib(),
    }
    return seconds, memory, result


def run_ours(spark: SparkSession, warehouse: Path, table: str, rows: int) -> dict[str, Any]:
    path = table_path(warehouse, table)
    files_before, bytes_before = files_and_bytes(spark, path)
    plan = make_plan(table, RULE, segments_of(spark, path, table, rows))
    seconds, memory, execution = timed(lambda: execute_merge(spark, warehouse, plan))
    files_after, bytes_after = files_and_bytes(spark, path)
    return {
        "method": "ours (execute_merge)",
        "partitioned": True,
        "input_segments": len(plan.inputs),
        "input_bytes": bytes_before,
        "output_bytes": bytes_after,
        "files_before": files_before,
        "files_after": files_after,
        "seconds": seconds,
        "mb_per_s": bytes_before / MIB / seconds,
        **memory,
        "table_version": execution.version,
        "target_output_files": max(1, math.ceil(sum(s.bytes for s in plan.inputs) / TARGET_FILE_BYTES)),
    }


def run_optimize(spark: SparkSession, path: Path, partitioned: bool) -> dict[str, Any]:
    files_before, bytes_before = files_and_bytes(spark, path)
    seconds, memory, metrics_df = timed(
        lambda: DeltaTable.forPath(spark, str(path)).optimize().executeCompaction()
    )
    files_after, bytes_after = files_and_bytes(spark, path)
    metrics = metrics_df.first()
    return {
        "method": "Delta OPTIMIZE",
        "partitioned": partitioned,
        "input_bytes": bytes_before,
        "output_bytes": bytes_after,
        "files_before": files_before,
        "files_after": files_after,
        "seconds": seconds,
        "mb_per_s": bytes_before / MIB / seconds,
        **memory,
        "partitions_optimized": (
            metrics["metrics"]["partitionsOptimized"] if metrics and metrics["metrics"] else None
        ),
    }


def warm_up(spark: SparkSession, root: Path, per_file: int) -> None:
    """Run both code paths once on a tiny table so neither measured run pays JIT and class loading."""
    root.mkdir()
    df = segment_rows(spark, 4, 1_000 * per_file, per_file, START)
    write_table(df, root / "w_ours", partitioned=True)
    write_table(df, root / "w_opt_part", partitioned=True)
    write_table(df, root / "w_opt_plain", partitioned=False)
    run_ours(spark, root, "w_ours", 1_000 * per_file)
    run_optimize(spark, root / "w_opt_part", partitioned=True)
    run_optimize(spark, root / "w_opt_plain", partitioned=False)
    checksum(spark, root / "w_ours")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20 segments x 2k rows (CI smoke run)")
    parser.add_argument("--segments", type=int, default=None, help="segments (default 200; quick 20)")
    parser.add_argument("--rows", type=int, default=None, help="rows per segment (default 25000; quick 2000)")
    parser.add_argument("--files-per-segment", type=int, default=2, help="files each load leaves (default 2)")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch dir (default: a temp dir)")
    args = parser.parse_args()
    segments = args.segments or (20 if args.quick else 200)
    rows = args.rows or (2_000 if args.quick else 25_000)
    per_file = args.files_per_segment
    if rows % per_file:
        parser.error("--rows must be divisible by --files-per-segment")

    began = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="bench-merge-", dir=args.workdir))
    machine = machine_info()
    spark = build_spark("bench-merge-throughput", master="local[2]")
    spark_quiet(spark)
    try:
        wh = scratch / "warehouse"
        wh.mkdir()
        source_part, source_plain = scratch / "source_part", scratch / "source_plain"
        df = segment_rows(spark, segments, rows, per_file, START)
        t = time.perf_counter()
        write_table(df, source_part, partitioned=True)
        write_table(df, source_plain, partitioned=False)
        setup_seconds = time.perf_counter() - t
        reference = checksum(spark, source_part)
        plain_reference = checksum(spark, source_plain)
        assert reference == plain_reference, f"plain table differs: {plain_reference} vs {reference}"
        for name, source in (
            ("ours_a", source_part),
            ("opt_part", source_part),
            ("ours_b", source_part),
            ("opt_plain", source_plain),
        ):
            shutil.copytree(source, wh / name)
        print(
            f"{segments} segments x {rows:,} rows ({per_file} files each), "
            f"{files_and_bytes(spark, source_part)[1] / MIB:.1f} MiB partitioned; "
            f"setup {setup_seconds:.0f}s in {scratch}"
        )

        warm_up(spark, scratch / "warm", per_file)
        # pair 1: both partitioned by segment_id; pair 2: OPTIMIZE on the plain table
        runs = {
            "ours_a": run_ours(spark, wh, "ours_a", rows),
            "opt_part": run_optimize(spark, wh / "opt_part", partitioned=True),
            "opt_plain": run_optimize(spark, wh / "opt_plain", partitioned=False),
            "ours_b": run_ours(spark, wh, "ours_b", rows),
        }
        for name, run in runs.items():
            run["checksum_ok"] = checksum(spark, wh / name) == reference
            run["copy"] = name
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    pairs = [
        {
            "pair": "1: both partitioned by segment_id",
            "ours": "ours_a",
            "optimize": "opt_part",
            "note": "OPTIMIZE compacts within each segment_id partition: N segments stay N files",
        },
        {
            "pair": "2: OPTIMIZE on an unpartitioned copy",
            "ours": "ours_b",
            "optimize": "opt_plain",
            "note": "OPTIMIZE bin-packs the whole table (the same end state as our merge)",
        },
    ]
    for p in pairs:
        p["ratio_ours_over_optimize"] = runs[p["ours"]]["mb_per_s"] / runs[p["optimize"]]["mb_per_s"]

    print()
    print_table(
        ["copy", "method", "partitioned", "MiB in", "seconds", "MiB/s", "files before", "files after",
         "peak RSS MiB", "checksum"],
        [
            [name, r["method"], "yes" if r["partitioned"] else "no", r["input_bytes"] / MIB, r["seconds"],
             r["mb_per_s"], r["files_before"], r["files_after"], r["peak_rss_mib"],
             "ok" if r["checksum_ok"] else "MISMATCH"]
            for name, r in runs.items()
        ],
    )  # fmt: skip
    print()
    print_table(
        ["pair", "ours MiB/s", "OPTIMIZE MiB/s", "ours/OPTIMIZE"],
        [
            [p["pair"], runs[p["ours"]]["mb_per_s"], runs[p["optimize"]]["mb_per_s"],
             f"{p['ratio_ours_over_optimize']:.2f}x"]
            for p in pairs
        ],
    )  # fmt: skip
    print()
    print(
        "note: on the partitioned table OPTIMIZE only joins the files inside each segment_id partition\n"
        f"      ({runs['opt_part']['files_before']} -> {runs['opt_part']['files_after']} files), while our merge "
        f"rewrites all segments as one ({runs['ours_a']['files_before']} -> "
        f"{runs['ours_a']['files_after']}):\n"
        "      pair 1 compares different work; pair 2 (plain table) compares the same end state.\n"
        "      Peak RSS is the whole driver tree (Python + JVM) sampled every 0.1 s during each run;\n"
        "      the JSON has the RSS before each run and the split per process at the peak."
    )
    ok = all(r["checksum_ok"] for r in runs.values())
    print(
        f"row count and checksum identical across all copies: {'yes' if ok else 'NO'} ({reference[0]:,} rows)"
    )
    total = time.perf_counter() - began
    print(f"total {total:.0f}s")
    save_results(
        "merge_throughput",
        args.quick,
        {
            "machine": machine,
            "params": {"segments": segments, "rows_per_segment": rows, "files_per_segment": per_file},
            "reference": {"rows": reference[0], "checksum": str(reference[1])},
            "setup_seconds": setup_seconds,
            "runs": runs,
            "pairs": pairs,
            "all_checksums_match": ok,
            "total_seconds": total,
        },
    )
    if not ok:
        raise SystemExit("checksum mismatch")


if __name__ == "__main__":
    main()

"""Merge throughput: our executor (one MergePlan over every segment) against Delta's OPTIMIZE.

The same rows (default 200 segments x 46k rows with a 100-character note, about
1 GiB; each segment split into two small files, as a parallel load leaves it)
are written twice:
partitioned by `segment_id`, as the project writes tables, and unpartitioned (a
plain table with a segment_id column). Each run compacts its own fresh
`shutil.copytree` copy, timed from after an `os.sync()` (so no run pays for writing back the
copy or the run before it):

- ours: `compactor.delta.rewrite.merge.execute_merge` with one plan over all segments
  (`make_plan(..., rule="bench")`) on a partitioned copy: bookkeeping included;
- OPTIMIZE, unpartitioned: `DeltaTable.optimize().executeCompaction()` on a plain
  copy, which bin-packs the whole table: the same end state as our merge;
- ours without content certificates (`MergeSettings(certify=False)`): what proving the merge's
  rows costs, against the same merge with them;
- with --with-partitioned-optimize, also OPTIMIZE on a partitioned copy. It
  bin-packs within each partition, so it only joins each segment's own files (N
  partitions stay N files): different, smaller-grained work, shown for context.

Runs go in rounds (default 2; the order rotates each round), after one untimed
warm-up of every code path on a tiny table. Reported: input MiB/s (input bytes /
wall seconds, medians over rounds), files before and after (`inputFiles()` of
the snapshot), peak RSS of the driver tree (Python + the JVM it starts, summed
as PSS by psutil every 0.2 s), and ours/OPTIMIZE ratios (of the medians, and
per round). Every compacted copy is checked to hold the same row count and
order-independent checksum (sum of xxhash64 of every column but segment_id, as
decimal(38,0)) as the source.

Run: .venv/bin/python bench/merge_throughput.py [--quick] [--segments N --rows R --payload C --repeats K]
Saves bench/results/merge_throughput[_quick].json.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from compactor.delta.paths import SEGMENT_COLUMN, TARGET_FILE_BYTES, table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.spark_store import cores_but_one
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.spark.session import build_spark
from harness.probes import PeakRss
from harness.report import MIB, bench_parser, machine_info, print_table, save_results
from harness.spark_rows import PAYLOAD_MAX, segment_rows, spark_quiet
from harness.targets import Target, judge

START = datetime(2024, 1, 1, tzinfo=UTC)
RULE = "bench"
# our merge against the same rows rewritten another way, keyed by that way (the pair it is in)
TARGETS = (
    # #54's bounds (the run of 2026-11-30 13:24 was judged by the earlier 0.85x and 1.3x)
    Target("parquet", "our merge's MiB/s / a raw Parquet rewrite's", 0.9, at_most=False, unit="x"),
    Target("opt_plain", "our merge's MiB/s / Delta's OPTIMIZE's", 1.5, at_most=False, unit="x"),
    # the merge's time with certificates at most 1.15x its time without: MiB/s at least 1/1.15,
    # unrounded (0.8698 met it; a bound rounded to 0.87 called it missed)
    Target(
        "ours_uncertified",
        "our merge's MiB/s with content certificates / without",
        1 / 1.15,
        at_most=False,
        unit="x",
    ),
)


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
    return rows_checksum(spark.read.format("delta").load(str(path)))


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


T = TypeVar("T")


def timed(work: Callable[[], T]) -> tuple[float, dict[str, Any], T]:
    """(seconds, RSS figures in MiB, result) of `work()`, started with no dirty pages waiting:
    a copy made just before (ours and OPTIMIZE copy 1 GiB, the raw rewrite reads the source in
    place) or the run before it would otherwise be written back while it runs."""
    os.sync()
    # a sample of a 2 GiB JVM's PSS walks its page tables in the kernel: at the probe's default
    # 0.2 s that took a tenth of a core from the 2 the rewrite runs on (and more from ours than
    # from the raw rewrite); a sample a second still sees a 10-second run's peak
    with PeakRss(interval=1.0) as rss:
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


def run_ours(
    spark: SparkSession,
    warehouse: Path,
    table: str,
    rows: int,
    write_tasks: int | None = None,
    certify: bool = True,
) -> dict[str, Any]:
    path = Path(table_uri(warehouse, table))
    files_before, bytes_before = files_and_bytes(spark, path)
    plan = make_plan(table, RULE, segments_of(spark, path, table, rows))
    seconds, memory, execution = timed(
        lambda: execute_merge(spark, warehouse, plan, MergeSettings(write_tasks=write_tasks, certify=certify))
    )
    return {
        "method": "ours (execute_merge)"
        + (f", {write_tasks} write task(s)" if write_tasks else "")
        + ("" if certify else ", no certificate"),
        "partitioned": True,
        "input_segments": len(plan.inputs),
        **_rewrite_figures(spark, path, files_before, bytes_before, seconds, memory),
        "table_version": execution.version,
        "target_output_files": max(1, math.ceil(sum(s.bytes for s in plan.inputs) / TARGET_FILE_BYTES)),
    }


def _rewrite_figures(
    spark: SparkSession,
    path: Path,
    files_before: int,
    bytes_before: int,
    seconds: float,
    memory: dict[str, Any],
) -> dict[str, Any]:
    """What every method reports: files and bytes before and after, time, rate, memory."""
    files_after, bytes_after = files_and_bytes(spark, path)
    return {
        "input_bytes": bytes_before,
        "output_bytes": bytes_after,
        "files_before": files_before,
        "files_after": files_after,
        "seconds": seconds,
        "mb_per_s": bytes_before / MIB / seconds,
        **memory,
    }


def run_optimize(spark: SparkSession, path: Path, partitioned: bool) -> dict[str, Any]:
    files_before, bytes_before = files_and_bytes(spark, path)
    seconds, memory, metrics_df = timed(
        lambda: DeltaTable.forPath(spark, str(path)).optimize().executeCompaction()
    )
    metrics = metrics_df.first()
    return {
        "method": "Delta OPTIMIZE",
        "partitioned": partitioned,
        **_rewrite_figures(spark, path, files_before, bytes_before, seconds, memory),
        "partitions_optimized": (
            metrics["metrics"]["partitionsOptimized"] if metrics and metrics["metrics"] else None
        ),
    }


def run_parquet(spark: SparkSession, source: Path, out: Path) -> dict[str, Any]:
    """The ceiling: the same rows read and written as plain Parquet into the same number of
    files our merge writes, with no Delta transaction, no bookkeeping and no segment id change."""
    files_before, bytes_before = files_and_bytes(spark, source)
    target = max(1, math.ceil(bytes_before / TARGET_FILE_BYTES))
    seconds, memory, _ = timed(
        lambda: spark.read.format("delta").load(str(source)).coalesce(target).write.parquet(str(out))
    )
    written = [p for p in out.glob("*.parquet")]
    return {
        "method": "raw Parquet rewrite",
        "partitioned": False,
        "input_bytes": bytes_before,
        "output_bytes": sum(p.stat().st_size for p in written),
        "files_before": files_before,
        "files_after": len(written),
        "seconds": seconds,
        "mb_per_s": bytes_before / MIB / seconds,
        **memory,
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
    run_parquet(spark, root / "w_opt_part", root / "w_parquet")
    checksum(spark, root / "w_ours")


METHODS = ("ours", "opt_part", "opt_plain", "parquet", "ours_uncertified")
LABELS = {
    "ours": "ours: execute_merge, partitioned",
    "ours_job": "ours as a job writes: cores less one",
    "ours_uncertified": "ours without content certificates",
    "opt_part": "OPTIMIZE, partitioned",
    "opt_plain": "OPTIMIZE, unpartitioned",
    "parquet": "ceiling: raw Parquet rewrite",
}


def run_method(
    spark: SparkSession, method: str, source: Path, wh: Path, name: str, rows: int
) -> dict[str, Any]:
    """One timed run on its own copy (the ceiling reads the source and writes beside it), with
    the checksum of what it left."""
    if method == "parquet":
        run = run_parquet(spark, source, wh / name)
        return run | {"checksum": rows_checksum(spark.read.parquet(str(wh / name)))}
    shutil.copytree(source, wh / name)
    if method == "ours":
        run = run_ours(spark, wh, name, rows)
    elif method == "ours_uncertified":
        run = run_ours(spark, wh, name, rows, certify=False)
    elif method == "ours_job":
        run = run_ours(spark, wh, name, rows, write_tasks=cores_but_one(spark))
    else:
        run = run_optimize(spark, wh / name, partitioned=method == "opt_part")
    return run | {"checksum": checksum(spark, wh / name)}


def summarise(runs: list[dict[str, Any]], methods: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    out = {}
    for method in methods:
        mine = [r for r in runs if r["key"] == method]
        rates = [r["mb_per_s"] for r in mine]
        out[method] = {
            "label": LABELS[method],
            "runs": len(mine),
            "input_mib": statistics.median(r["input_bytes"] for r in mine) / MIB,
            "seconds_median": statistics.median(r["seconds"] for r in mine),
            "mb_per_s_median": statistics.median(rates),
            "mb_per_s_min": min(rates),
            "mb_per_s_max": max(rates),
            "files_before": mine[0]["files_before"],
            "files_after": mine[0]["files_after"],
            "peak_rss_mib_max": max(r["peak_rss_mib"] for r in mine),
            "checksums_ok": all(r["checksum_ok"] for r in mine),
        }
    return out


def main() -> None:
    parser = bench_parser(__doc__, "20 segments x 2k rows, 1 round")
    parser.add_argument("--segments", type=int, default=None, help="segments (default 200; quick 20)")
    parser.add_argument("--rows", type=int, default=None, help="rows per segment (default 46000; quick 2000)")
    parser.add_argument(
        "--payload",
        type=int,
        default=None,
        help=f"hex characters of incompressible text per row, 0-{PAYLOAD_MAX} (default 100; quick 0)",
    )
    parser.add_argument("--files-per-segment", type=int, default=2, help="files each load leaves (default 2)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds of runs (default 2; quick 1)")
    parser.add_argument(
        "--with-partitioned-optimize",
        action="store_true",
        help="also time OPTIMIZE on the partitioned copy (it compacts inside each segment: other work)",
    )
    parser.add_argument(
        "--with-job-write-tasks",
        action="store_true",
        help="also time our merge as a job runs it: written by Spark's cores less one tasks "
        "(operations.merge_write_tasks' default), leaving a core to the stream",
    )
    parser.add_argument(
        "--name", default="merge_throughput", help="results file name (default merge_throughput)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="scratch dir (default: a temp dir)")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting to try (repeatable)",
    )
    args = parser.parse_args()
    segments = args.segments or (20 if args.quick else 200)
    rows = args.rows or (2_000 if args.quick else 46_000)
    repeats = args.repeats or (1 if args.quick else 2)
    payload = args.payload if args.payload is not None else (0 if args.quick else 100)
    methods: tuple[str, ...] = (
        METHODS if args.with_partitioned_optimize else ("ours", "opt_plain", "parquet", "ours_uncertified")
    )
    methods += ("ours_job",) if args.with_job_write_tasks else ()
    per_file = args.files_per_segment
    if rows % per_file:
        parser.error("--rows must be divisible by --files-per-segment")

    began = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="bench-merge-", dir=args.workdir))
    machine = machine_info()
    extra = dict(item.split("=", 1) for item in args.spark_conf)
    spark = build_spark("bench-merge-throughput", master="local[2]", extra_conf=extra)
    spark_quiet(spark)
    runs: list[dict[str, Any]] = []
    try:
        wh = scratch / "warehouse"
        wh.mkdir()
        sources = {"ours": scratch / "source_part", "opt_part": scratch / "source_part"}
        sources["parquet"] = sources["ours_job"] = sources["ours_uncertified"] = scratch / "source_part"
        sources["opt_plain"] = scratch / "source_plain"
        df = segment_rows(spark, segments, rows, per_file, START, payload=payload)
        t = time.perf_counter()
        write_table(df, sources["ours"], partitioned=True)
        write_table(df, sources["opt_plain"], partitioned=False)
        setup_seconds = time.perf_counter() - t
        reference = checksum(spark, sources["ours"])
        plain_reference = checksum(spark, sources["opt_plain"])
        assert reference == plain_reference, f"plain table differs: {plain_reference} vs {reference}"
        print(
            f"{segments} segments x {rows:,} rows ({per_file} files each, {payload}-char note), "
            f"{files_and_bytes(spark, sources['ours'])[1] / MIB:.1f} MiB partitioned; "
            f"tables written in {setup_seconds:.0f}s; {repeats} round(s)",
            flush=True,
        )
        warm_up(spark, scratch / "warm", per_file)
        for round_ in range(repeats):
            order = (
                methods[round_ % len(methods) :] + methods[: round_ % len(methods)]
            )  # no method always first
            for method in order:
                name = f"{method}_{round_}"
                run = run_method(spark, method, sources[method], wh, name, rows)
                run.update(key=method, copy=name, round=round_)
                run["checksum_ok"] = run.pop("checksum") == reference
                runs.append(run)
                shutil.rmtree(wh / name)
                print(
                    f"  round {round_}: {LABELS[method]:<34} {run['seconds']:7.2f}s "
                    f"{run['mb_per_s']:7.2f} MiB/s  files {run['files_before']} -> {run['files_after']}",
                    flush=True,
                )
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    summary = summarise(runs, methods)
    all_pairs: list[dict[str, Any]] = [
        {
            "pair": "1: both partitioned by segment_id",
            "ours": "ours",
            "optimize": "opt_part",
            "note": "OPTIMIZE compacts within each segment_id partition: N segments stay N files",
        },
        {
            "pair": "2: OPTIMIZE on an unpartitioned copy",
            "ours": "ours",
            "optimize": "opt_plain",
            "note": "OPTIMIZE bin-packs the whole table (the same end state as our merge: one file)",
        },
    ]
    all_pairs.append(
        {
            "pair": "3: the ceiling, a raw Parquet rewrite of the same rows",
            "ours": "ours",
            "optimize": "parquet",
            "note": "no Delta transaction, statistics or bookkeeping: the physical limit of the rewrite",
        }
    )
    all_pairs.append(
        {
            "pair": "4: ours as a job writes (cores less one), over ours alone",
            "ours": "ours_job",
            "optimize": "ours",
            "note": "operations.merge_write_tasks' default: a core stays free for the stream",
        }
    )
    all_pairs.append(
        {
            "pair": "5: ours with content certificates over ours without",
            "ours": "ours",
            "optimize": "ours_uncertified",
            "note": "what proving the merge's rows costs (operations.certify_merges)",
        }
    )
    pairs = [p for p in all_pairs if p["ours"] in methods and p["optimize"] in methods]
    for p in pairs:
        ours, theirs = summary[p["ours"]], summary[p["optimize"]]
        p["ratio_ours_over_optimize"] = ours["mb_per_s_median"] / theirs["mb_per_s_median"]
        p["ratio_per_round"] = [
            next(r for r in runs if r["round"] == k and r["key"] == p["ours"])["mb_per_s"]
            / next(r for r in runs if r["round"] == k and r["key"] == p["optimize"])["mb_per_s"]
            for k in range(repeats)
        ]

    print()
    print_table(
        [
            "method",
            "runs",
            "MiB in",
            "median s",
            "median MiB/s",
            "min-max MiB/s",
            "files before",
            "files after",
            "peak RSS MiB",
            "checksum",
        ],
        [
            [
                s["label"],
                s["runs"],
                s["input_mib"],
                s["seconds_median"],
                s["mb_per_s_median"],
                f"{s['mb_per_s_min']:.2f}-{s['mb_per_s_max']:.2f}",
                s["files_before"],
                s["files_after"],
                s["peak_rss_mib_max"],
                "ok" if s["checksums_ok"] else "MISMATCH",
            ]
            for s in summary.values()
        ],
    )
    print()
    print_table(
        ["pair", "ours MiB/s", "theirs MiB/s", "ours/theirs", "per round"],
        [
            [
                p["pair"],
                summary[p["ours"]]["mb_per_s_median"],
                summary[p["optimize"]]["mb_per_s_median"],
                f"{p['ratio_ours_over_optimize']:.2f}x",
                " ".join(f"{x:.2f}" for x in p["ratio_per_round"]),
            ]
            for p in pairs
        ],
    )
    print()
    if "opt_part" in summary:
        print(
            "note: on the partitioned table OPTIMIZE only joins the files inside each segment_id partition\n"
            f"      ({summary['opt_part']['files_before']} -> {summary['opt_part']['files_after']} files), while "
            f"our merge rewrites all segments as one ({summary['ours']['files_before']} -> "
            f"{summary['ours']['files_after']}):\n"
            "      pair 1 compares different work; pair 2 (plain table) compares the same end state."
        )
    print(
        "note: pairs share our runs (the same operation on identical copies). MiB/s = input MiB / wall s,\n"
        "      medians over rounds. Peak RSS: the driver tree (Python + JVM), PSS summed every 0.2 s."
    )
    ratios = {p["optimize"]: p["ratio_ours_over_optimize"] for p in pairs}
    targets = [t for t in TARGETS if t.key in ratios]
    verdicts = judge(targets, {t.key: ratios[t.key] for t in targets})
    ok = all(r["checksum_ok"] for r in runs)
    print(
        f"row count and checksum identical across all copies: {'yes' if ok else 'NO'} ({reference[0]:,} rows)"
    )
    total = time.perf_counter() - began
    print(f"total {total:.0f}s")
    save_results(
        args.name,
        args.quick,
        {
            "machine": machine,
            "params": {
                "segments": segments,
                "rows_per_segment": rows,
                "payload_chars": payload,
                "files_per_segment": per_file,
                "repeats": repeats,
                "methods": list(methods),
                "spark_conf": extra,
            },
            "reference": {"rows": reference[0], "checksum": str(reference[1])},
            "setup_seconds": setup_seconds,
            "summary": summary,
            "pairs": pairs,
            "runs": runs,
            "all_checksums_match": ok,
            "verdicts": verdicts,
            "total_seconds": total,
        },
    )
    if not ok:
        raise SystemExit("checksum mismatch")


if __name__ == "__main__":
    main()

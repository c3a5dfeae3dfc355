"""Query benefit of compaction: one scan-and-filter query before and after our merges.

A table of many small segments (default 200 hourly segments x 10k rows, two files
each, partitioned by segment_id as the project writes it) is queried with

    SELECT sum(amount), count(*) WHERE customer_id < 1000
                                   AND event_time in [day 2 00:00, day 5 00:00)

in three states of the same data, compacted by our executor
(`compactor.delta.merge.execute_merge` with `make_plan`):

1. as loaded (N segments, 2N files);
2. after day merges: every full day of 24 hourly segments merged into one, as
   `auto_merge` with levels [day] would leave it;
3. after merging everything into one segment (as a month level would).

For each state: query time (median of 3 runs, after one untimed warm-up run),
files read (`inputFiles()` of the filtered DataFrame: Delta applies partition
pruning and its min/max data skipping there), checked against the scan's
`numFiles` metric after the query ran, the table's file count, and ratios against
the loaded state. The query result must be identical in every state.

Run: .venv/bin/python bench/query_benefit.py [--quick]   (quick: 48 segments x 1k rows)
Saves bench/results/query_benefit[_quick].json.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import (
    MIB,
    PeakRss,
    bench_parser,
    machine_info,
    print_table,
    save_results,
    segment_rows,
    spark_quiet,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.delta.merge import execute_merge
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.session import build_spark
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange

START = datetime(2024, 1, 1, tzinfo=UTC)
TABLE = "events"
RULE = "bench"
RUNS = 3


def query(spark: SparkSession, path: Path, days: int) -> DataFrame:
    lo = START + timedelta(days=1)
    hi = START + timedelta(days=min(days, 4))
    return (
        spark.read.format("delta")
        .load(str(path))
        .where((F.col("customer_id") < 1000) & (F.col("event_time") >= lo) & (F.col("event_time") < hi))
        .agg(F.sum("amount").alias("amount"), F.count("*").alias("rows"))
    )


def scan_metric(df: DataFrame, name: str) -> int | None:
    """Sum of SQL metric `name` over the file scans of `df`'s executed plan (after an action)."""
    total, found = 0, False
    stack = [df._jdf.queryExecution().executedPlan()]
    while stack:
        node = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            stack.append(node.executedPlan())
            continue
        if kind.endswith("QueryStageExec"):
            stack.append(node.plan())
            continue
        if kind in ("FileSourceScanExec", "BatchScanExec"):
            metric = node.metrics().get(name)
            if metric.isDefined():
                total += int(metric.get().value())
                found = True
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return total if found else None


def measure(spark: SparkSession, path: Path, days: int) -> dict[str, Any]:
    warm = query(spark, path, days)
    expected = warm.collect()[0]
    times = []
    scanned: int | None = None
    for _ in range(RUNS):
        began = time.perf_counter()  # from resolving the snapshot to the answer
        df = query(spark, path, days)
        row = df.collect()[0]
        times.append(time.perf_counter() - began)
        assert row == expected
        scanned = scan_metric(df, "numFiles")
    return {
        "seconds_median": statistics.median(times),
        "seconds_runs": times,
        "scan_num_files": scanned,
        "files_read": len(query(spark, path, days).inputFiles()),
        "table_files": len(spark.read.format("delta").load(str(path)).inputFiles()),
        "result": {"amount": str(expected["amount"]), "rows": int(expected["rows"])},
    }


def segments_now(path: Path, rows: int, known: dict[str, Segment]) -> list[Segment]:
    """The loaded segments (sizes from their files); merged ones come from `known`."""
    out = []
    for part in sorted(path.glob(f"{SEGMENT_COLUMN}=*")):
        sid = part.name.split("=", 1)[1]
        if sid in known:
            out.append(known[sid])
            continue
        if not sid.startswith("seg-"):
            continue  # a merged-away directory left behind (Delta does not delete data files)
        index = int(sid.rsplit("-", 1)[1])
        start = START + timedelta(hours=index)
        size = sum(f.stat().st_size for f in part.glob("*.parquet"))
        out.append(Segment(sid, TABLE, TimeRange(start, start + timedelta(hours=1)), START, rows, size))
    return out


def main() -> None:
    parser = bench_parser(__doc__, "48 segments x 1k rows")
    parser.add_argument("--segments", type=int, default=None, help="hourly segments (default 200; quick 48)")
    parser.add_argument("--rows", type=int, default=None, help="rows per segment (default 10000; quick 1000)")
    args = parser.parse_args()
    count = args.segments or (48 if args.quick else 200)
    rows = args.rows or (1_000 if args.quick else 10_000)
    days = -(-count // 24)

    began = time.perf_counter()
    machine = machine_info()
    scratch = Path(tempfile.mkdtemp(prefix="bench-query-"))
    spark = build_spark("bench-query-benefit", master="local[2]")
    spark_quiet(spark)
    states: list[dict[str, Any]] = []
    try:
        with PeakRss() as rss:
            warehouse = scratch / "warehouse"
            path = Path(table_uri(warehouse, TABLE))
            segment_rows(spark, count, rows, 2, START).write.format("delta").partitionBy(SEGMENT_COLUMN).save(
                str(path)
            )
            loaded = segments_now(path, rows, {})
            states.append({"state": f"as loaded ({len(loaded)} segments)", "segments": len(loaded)})
            states[-1].update(measure(spark, path, days))

            merged: dict[str, Segment] = {}
            t = time.perf_counter()
            for day in range(count // 24):
                group = [s for s in loaded if s.start.date() == (START + timedelta(days=day)).date()]
                plan = make_plan(TABLE, RULE, group, level="day")
                execute_merge(spark, warehouse, plan)
                merged[plan.output.id] = plan.output
            day_seconds = time.perf_counter() - t
            rest = [s for s in loaded if s.start >= START + timedelta(days=count // 24)]  # an unfinished day
            current = [*merged.values(), *rest]
            states.append(
                {
                    "state": f"day merges ({len(current)} segments)",
                    "segments": len(current),
                    "compact_seconds": day_seconds,
                }
            )
            states[-1].update(measure(spark, path, days))

            t = time.perf_counter()
            plan = make_plan(TABLE, RULE, current)
            execute_merge(spark, warehouse, plan)
            all_seconds = time.perf_counter() - t
            states.append({"state": "all merged (1 segment)", "segments": 1, "compact_seconds": all_seconds})
            states[-1].update(measure(spark, path, days))
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    base = states[0]
    for s in states:
        s["speedup_vs_loaded"] = base["seconds_median"] / s["seconds_median"]
        s["files_read_ratio_vs_loaded"] = (
            s["files_read"] / base["files_read"] if s["files_read"] and base["files_read"] else None
        )
    same = all(s["result"] == base["result"] for s in states)
    print(
        f"\n{count} hourly segments x {rows:,} rows; query: sum(amount), count(*) where customer_id < 1000 "
        f"and event_time in [day 2, day {min(days, 4) + 1})\n"
    )
    print_table(
        ["state", "table files", "files read", "scan numFiles", "median s", "runs s", "speed-up", "files read ratio"],
        [
            [s["state"], s["table_files"], s["files_read"], s["scan_num_files"], s["seconds_median"],
             " ".join(f"{x:.2f}" for x in s["seconds_runs"]), f"{s['speedup_vs_loaded']:.2f}x",
             f"{s['files_read_ratio_vs_loaded']:.3f}" if s["files_read_ratio_vs_loaded"] else "-"]
            for s in states
        ],
    )  # fmt: skip
    total = time.perf_counter() - began
    print(
        f"\nsame result in every state: {'yes' if same else 'NO'} ({base['result']}); "
        f"files read = inputFiles() of the filtered query (after Delta's data skipping), cross-checked\n"
        f"with the scan's numFiles metric. Peak driver RSS {rss.peak_mib:,.0f} MiB; total {total:.0f}s"
    )
    save_results(
        "query_benefit",
        args.quick,
        {
            "machine": machine,
            "params": {"segments": count, "rows_per_segment": rows, "files_per_segment": 2, "runs": RUNS},
            "states": states,
            "same_result": same,
            "peak_rss_mib": rss.peak / MIB,
            "total_seconds": total,
        },
    )
    if not same:
        raise SystemExit("query results differ between states")


if __name__ == "__main__":
    main()

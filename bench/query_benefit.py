"""Query benefit of compaction and of the order merges lay rows out in.

A table of many small segments (default 200 hourly segments x 50k rows, two files each,
partitioned by segment_id as the project writes it; columns customer_id (100k values), country
(20 values), event_time, amount) is queried three ways:

- point:       customer_id = 4242
- two columns: country = 'FR' and customer_id in [20000, 22000)
- time range:  event_time in [day 2, day 4)

in four states of the same rows:

1. as loaded;
2. our day merges without a layout (`execute_merge`, one plan per full day of 24 segments);
3. our day merges with `sort: {by: [customer_id, country], curve: zorder}`;
4. Delta's `OPTIMIZE ... ZORDER BY (customer_id, country)` on a plain (unpartitioned) copy.

Merges and OPTIMIZE write files of the same target size (--file-mib, default 4 MiB; Delta's
`optimize.maxFileSize` set to it), so that both cut the data into comparable files.

For each state and query: files read (`inputFiles()` of the filtered query, after Delta's data
skipping; cross-checked with the scan's `numFiles` metric), bytes scanned (the scan's
`filesSize`), and the median query time of 3 runs after one warm-up. Also the merge time and
MiB/s of our z-ordered day merges against OPTIMIZE ZORDER BY on the same rows. Every query's
answer must be identical in every state.

Targets (`TARGETS`): files read with our Z-order no more than OPTIMIZE ZORDER BY's on every
query; the point query reads at most 10 % of the files it reads after unsorted merges; our merge
with Z-order at least 1.2x OPTIMIZE ZORDER BY's MiB/s.

Run: .venv/bin/python bench/query_benefit.py [--quick]   (quick: 48 segments x 2k rows, 64 KiB files)
Saves bench/results/query_benefit[_quick].json.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.config.sort import SortConfig
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.spark.session import build_spark
from harness.probes import PeakRss
from harness.report import MIB, bench_parser, machine_info, print_table, save_results
from harness.spark_rows import segment_rows, spark_quiet
from harness.targets import Target, judge

START = datetime(2024, 1, 1, tzinfo=UTC)
TABLE = "events"
RULE = "bench"
RUNS = 3
TARGETS = (
    Target(
        "files_beyond_optimize", "files our zorder reads beyond OPTIMIZE ZORDER BY's, on the worst query", 0
    ),
    Target("point_ratio_vs_unsorted", "point query files / the unsorted merges'", 0.10),
    Target(
        "merge_rate_vs_optimize",
        "our zorder merge's MiB/s / OPTIMIZE ZORDER BY's",
        1.2,
        at_most=False,
        unit="x",
    ),
)


# the filters, built once a session is active
QUERIES: dict[str, Callable[[], Column]] = {
    "point": lambda: F.col("customer_id") == 4242,
    "two columns": lambda: (F.col("country") == "FR") & F.col("customer_id").between(20_000, 21_999),
    "time range": lambda: (F.col("event_time") >= START + timedelta(days=1)) & (F.col("event_time") < START + timedelta(days=3)),
}  # fmt: skip
COUNTRIES = [
    "AR",
    "AU",
    "BR",
    "CA",
    "CN",
    "DE",
    "ES",
    "FR",
    "GB",
    "IN",
    "IT",
    "JP",
    "KR",
    "MX",
    "NL",
    "NO",
    "PL",
    "SE",
    "US",
    "ZA",
]
ZORDER = SortConfig(by=("customer_id", "country"), curve="zorder")


def query(spark: SparkSession, path: Path, name: str) -> DataFrame:
    table = spark.read.format("delta").load(str(path))
    return table.where(QUERIES[name]()).agg(F.sum("amount").alias("amount"), F.count("*").alias("rows"))


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


def measure(spark: SparkSession, path: Path, name: str) -> dict[str, Any]:
    warm = query(spark, path, name)
    expected = warm.collect()[0]
    times = []
    scanned: int | None = None
    scanned_bytes: int | None = None
    for _ in range(RUNS):
        began = time.perf_counter()  # from resolving the snapshot to the answer
        df = query(spark, path, name)
        row = df.collect()[0]
        times.append(time.perf_counter() - began)
        assert row == expected
        scanned, scanned_bytes = scan_metric(df, "numFiles"), scan_metric(df, "filesSize")
    return {
        "seconds_median": statistics.median(times),
        "seconds_runs": times,
        "scan_num_files": scanned,
        "bytes_scanned": scanned_bytes,
        "files_read": len(query(spark, path, name).inputFiles()),
        "result": {"amount": str(expected["amount"]), "rows": int(expected["rows"])},
    }


def measure_all(spark: SparkSession, path: Path) -> dict[str, Any]:
    table_files = len(spark.read.format("delta").load(str(path)).inputFiles())
    return {"table_files": table_files, "queries": {name: measure(spark, path, name) for name in QUERIES}}


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


def day_merges(
    spark: SparkSession,
    warehouse: Path,
    loaded: list[Segment],
    count: int,
    order: SortConfig | None,
    file_bytes: int,
) -> float:
    """Every full day of 24 hourly segments merged into one, as auto_merge [day] would; seconds."""
    began = time.perf_counter()
    for day in range(count // 24):
        group = [s for s in loaded if s.start.date() == (START + timedelta(days=day)).date()]
        plan = make_plan(TABLE, RULE, group, level="day")
        execute_merge(spark, warehouse, plan, MergeSettings(order=order, target_file_bytes=file_bytes))
    return time.perf_counter() - began


def optimize_zorder(spark: SparkSession, path: Path, file_bytes: int) -> float:
    """OPTIMIZE ZORDER BY on the plain copy, with files of the same target size; seconds."""
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(file_bytes))
    try:
        began = time.perf_counter()
        DeltaTable.forPath(spark, str(path)).optimize().executeZOrderBy("customer_id", "country")
        return time.perf_counter() - began
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.maxFileSize")


def main() -> None:
    parser = bench_parser(__doc__, "48 segments x 2k rows, 64 KiB files")
    parser.add_argument("--segments", type=int, default=None, help="hourly segments (default 200; quick 48)")
    parser.add_argument("--rows", type=int, default=None, help="rows per segment (default 50000; quick 2000)")
    parser.add_argument(
        "--file-mib", type=float, default=None, help="target file size (default 4; quick 1/16)"
    )
    args = parser.parse_args()
    count = args.segments or (48 if args.quick else 200)
    rows = args.rows or (2_000 if args.quick else 50_000)
    file_bytes = int((args.file_mib or (1 / 16 if args.quick else 4)) * MIB)

    began = time.perf_counter()
    machine = machine_info()
    scratch = Path(tempfile.mkdtemp(prefix="bench-query-"))
    spark = build_spark("bench-query-benefit", master="local[2]")
    spark_quiet(spark)
    states: list[dict[str, Any]] = []
    merges: dict[str, Any] = {}
    try:
        with PeakRss() as rss:
            country = F.element_at(
                F.array(*map(F.lit, COUNTRIES)), (F.pmod(F.col("order_ref"), F.lit(20)) + 1).cast("int")
            )
            data = segment_rows(spark, count, rows, 2, START).withColumn("country", country)
            copies = {name: scratch / name for name in ("plain", "zorder", "optimize")}
            for name, warehouse in copies.items():
                writer = data.write.format("delta")
                if name != "optimize":  # OPTIMIZE's copy: the same rows in one unpartitioned table
                    writer = writer.partitionBy(SEGMENT_COLUMN)
                writer.save(table_uri(warehouse, TABLE))
            paths = {name: Path(table_uri(w, TABLE)) for name, w in copies.items()}
            loaded = segments_now(paths["plain"], rows, {})
            input_mib = sum(s.bytes for s in loaded[: (count // 24) * 24]) / MIB

            states.append(
                {"state": f"as loaded ({len(loaded)} segments)", **measure_all(spark, paths["plain"])}
            )
            seconds = day_merges(spark, copies["plain"], loaded, count, None, file_bytes)
            merges["ours, no layout"] = seconds
            states.append({"state": "day merges, no layout", **measure_all(spark, paths["plain"])})
            seconds = day_merges(spark, copies["zorder"], loaded, count, ZORDER, file_bytes)
            merges["ours, zorder(customer_id,country)"] = seconds
            states.append({"state": "day merges, zorder", **measure_all(spark, paths["zorder"])})
            seconds = optimize_zorder(spark, paths["optimize"], file_bytes)
            merges["OPTIMIZE ZORDER BY (customer_id, country)"] = seconds
            states.append({"state": "OPTIMIZE ZORDER BY", **measure_all(spark, paths["optimize"])})
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    report(args.quick, count, rows, file_bytes, input_mib, states, merges, machine, rss.peak, began)


def report(
    quick: bool,
    count: int,
    rows: int,
    file_bytes: int,
    input_mib: float,
    states: list[dict[str, Any]],
    merges: dict[str, float],
    machine: dict[str, Any],
    peak_rss: float,
    began: float,
) -> None:
    base = states[0]["queries"]
    same = all(s["queries"][q]["result"] == base[q]["result"] for s in states for q in QUERIES)
    print(
        f"\n{count} hourly segments x {rows:,} rows; files of {file_bytes / MIB:.3g} MiB; queries: {', '.join(QUERIES)}\n"
    )
    print_table(
        ["state", "query", "table files", "files read", "scan numFiles", "MiB scanned", "median s"],
        [
            [
                s["state"],
                q,
                s["table_files"],
                m["files_read"],
                m["scan_num_files"],
                (m["bytes_scanned"] or 0) / MIB,
                m["seconds_median"],
            ]
            for s in states
            for q, m in s["queries"].items()
        ],
        left=(0, 1),
    )
    print()
    print_table(
        ["merge", "seconds", "input MiB", "MiB/s"],
        [[name, seconds, input_mib, input_mib / seconds] for name, seconds in merges.items()],
        left=(0,),
    )
    by_state = {s["state"]: s["queries"] for s in states}
    ours, theirs, unsorted = (
        by_state["day merges, zorder"],
        by_state["OPTIMIZE ZORDER BY"],
        by_state["day merges, no layout"],
    )
    beyond = max(ours[q]["files_read"] - theirs[q]["files_read"] for q in QUERIES)
    point = ours["point"]["files_read"] / max(1, unsorted["point"]["files_read"])
    rate = merges["OPTIMIZE ZORDER BY (customer_id, country)"] / merges["ours, zorder(customer_id,country)"]
    print()
    pairs = ", ".join(f"{q} {ours[q]['files_read']} vs {theirs[q]['files_read']}" for q in QUERIES)
    print(f"files read, ours vs OPTIMIZE ZORDER BY: {pairs}")
    figures = {
        "files_beyond_optimize": beyond,
        "point_ratio_vs_unsorted": point,
        "merge_rate_vs_optimize": rate,
    }
    verdicts = judge(TARGETS, figures)
    total = time.perf_counter() - began
    print(
        f"same result in every state: {'yes' if same else 'NO'}; peak driver RSS {peak_rss / MIB:,.0f} MiB; total {total:.0f}s"
    )
    save_results(
        "query_benefit",
        quick,
        {
            "machine": machine,
            "params": {
                "segments": count,
                "rows_per_segment": rows,
                "files_per_segment": 2,
                "runs": RUNS,
                "file_bytes": file_bytes,
            },
            "states": states,
            "merges_seconds": merges,
            "input_mib": input_mib,
            "same_result": same,
            "verdicts": verdicts,
            "peak_rss_mib": peak_rss / MIB,
            "total_seconds": total,
        },
    )
    if not same:
        raise SystemExit("query results differ between states")


if __name__ == "__main__":
    main()

"""The job's own catalog table after many merges: its files and bytes stay bounded.

The catalog (`<warehouse>/_compactor/catalog` and its journal) takes a save per batch; each save
is a journal file, folded into the Delta table every `COMPACT_EVERY` saves; the table's small
files are bin-packed and vacuumed by its upkeep (every 6 hours in a job). Here the real store
(`DeltaCatalogStore` on local[2]) takes the saves of M merges (10,000; --quick: 1,000) over 20
tables, each step a load and, once a table holds three live segments, the merge of its two
oldest (so each table keeps two or three live segments, as a levelled rule keeps it); upkeep
runs five times (every 2,000 merges of 10,000, standing for 6 hours at about 0.1 merges a second;
--quick: 400 merges, twice).

Twenty times over the run (--quick: ten) it records the catalog's files (data files on disk and
live in the newest snapshot, log files, commits since the newest checkpoint, journal files) and
bytes. Bounded means: the most live files in the second half at most 1.5x the most in the first,
and log commits since a checkpoint at most 10 (Delta checkpoints the catalog's own commits). The
files on disk are printed, not bounded: VACUUM keeps replaced files for the table's retention
(7 days), which a compressed run never reaches. Bytes grow with the retired partition
(what is left of each merged-away segment, kept for good and read by id): printed per 1,000
merges.

Run: .venv/bin/python bench/catalog_growth.py [--quick]; saves bench/results/catalog_growth[_quick].json.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.report import MIB, bench_parser, print_table, save_results
from harness.targets import Target, judge

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLES = 20
TARGETS = (
    Target(
        "live_files_second_half_vs_first", "the most live files in the second half / the first", 1.5, unit="x"
    ),
    Target("log_commits_since_checkpoint_max", "the catalog's log commits since a checkpoint", 10),
)
START = datetime(2026, 1, 1, tzinfo=UTC)


def catalog_files(root: Path) -> dict[str, Any]:
    """What `_compactor/` holds: the catalog table's data and log files, and the journal's."""
    table, journal = root / "catalog", root / "catalog-journal"
    data = [p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts]
    log = table / "_delta_log"
    versions = [int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit()]
    checkpoints = [int(p.name[:20]) for p in log.glob("*.checkpoint*.parquet")]
    return {
        "data_files": len(data),
        "data_mib": round(sum(p.stat().st_size for p in data) / MIB, 3),
        "log_files": sum(1 for _ in log.iterdir()) if log.exists() else 0,
        "log_commits_since_checkpoint": max(versions, default=-1) - max(checkpoints, default=-1),
        "journal_files": sum(1 for _ in journal.rglob("*.json")) if journal.exists() else 0,
        "total_mib": round(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / MIB, 3),
    }


def live_files(spark: SparkSession, root: Path) -> int:
    from compactor.delta.log.snapshot import newest_snapshot

    return int(newest_snapshot(spark, str(root / "catalog"))[1].numOfFiles())


def run(work: Path, merges: int) -> dict[str, Any]:
    from compactor.catalog.changes import PlanApplied, SegmentAdded
    from compactor.catalog.fold import SegmentCatalog
    from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
    from compactor.domain.plans import make_plan
    from compactor.domain.segments import Segment, TimeRange
    from compactor.spark.session import build_spark

    spark = build_spark("bench-catalog-growth", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    warehouse = work / "warehouse"
    store = DeltaCatalogStore(spark, warehouse)
    catalog = SegmentCatalog.from_store(store.load())
    live: dict[str, list[Segment]] = {f"t{i:02d}": [] for i in range(TABLES)}
    samples: list[dict[str, Any]] = []
    done, step, began, save_s = 0, 0, time.monotonic(), 0.0
    samples_wanted, upkeeps = (10, 2) if merges < 5000 else (20, 5)  # a full run: upkeep every 2,000
    sample_every, upkeep_every = max(1, merges // samples_wanted), max(1, merges // upkeeps)
    try:
        while done < merges:
            table = f"t{step % TABLES:02d}"
            hour = START + timedelta(hours=step)
            load = Segment(
                f"l{step:07d}", table, TimeRange(hour, hour + timedelta(hours=1)), hour, records=20
            )
            catalog.apply(SegmentAdded(load))
            live[table].append(load)
            if len(live[table]) >= 3:
                plan = make_plan(table, "minor", live[table][:2])
                catalog.apply(PlanApplied(plan, (plan.output,), step))
                live[table] = [plan.output, *live[table][2:]]
                done += 1
                if done % upkeep_every == 0:
                    store.upkeep(force=True)
                if done % sample_every == 0:
                    store.compact()  # what the samples count is the table's, not a journal's
                    sample = {"merges": done, "seconds": round(time.monotonic() - began, 1)}
                    sample |= catalog_files(warehouse / "_compactor")
                    sample["snapshot_files"] = live_files(spark, warehouse / "_compactor")
                    samples.append(sample)
                    print(f"  {done:>6,} merges: {sample}", flush=True)
            saved = time.monotonic()
            store.save(catalog.take_changes())  # one save per step, as a batch makes one
            save_s += time.monotonic() - saved
            step += 1
        reloaded = DeltaCatalogStore(spark, warehouse).load()
        live_rows = sum(len(s) for s in reloaded.segments.values())
    finally:
        spark.stop()
    half, end = samples[len(samples) // 2 - 1], samples[-1]
    first, second = samples[: len(samples) // 2], samples[len(samples) // 2 :]
    growth = max(s["snapshot_files"] for s in second) / max(1, max(s["snapshot_files"] for s in first))
    mib_per_1000 = (end["total_mib"] - half["total_mib"]) / max(1, end["merges"] - half["merges"]) * 1000
    print_table(
        ["merges", "data files", "in snapshot", "log files", "since checkpoint", "journal", "MiB"],
        [
            [
                s["merges"],
                s["data_files"],
                s["snapshot_files"],
                s["log_files"],
                s["log_commits_since_checkpoint"],
                s["journal_files"],
                s["total_mib"],
            ]
            for s in samples
        ],
    )
    failures = []
    if live_rows != sum(len(s) for s in live.values()):
        failures.append(
            f"the reloaded catalog holds {live_rows} live segments, not {sum(map(len, live.values()))}"
        )
    most_behind = max(s["log_commits_since_checkpoint"] for s in samples)
    verdicts = judge(
        TARGETS,
        {
            "live_files_second_half_vs_first": round(growth, 2),
            "log_commits_since_checkpoint_max": most_behind,
        },
    )
    return {
        "merges": done,
        "loads": step,
        "tables": TABLES,
        "upkeep_every_merges": upkeep_every,
        "save_ms_mean": round(save_s / max(1, step) * 1000, 2),
        "samples": samples,
        "live_files_second_half_vs_first": round(growth, 2),
        "mib_per_1000_merges_after_half": round(mib_per_1000, 3),
        "log_commits_since_checkpoint_max": most_behind,
        "live_segments_reloaded": live_rows,
        "verdicts": verdicts,
        "failures": failures,
    }


def main() -> None:
    parser = bench_parser(__doc__, "400 merges, 10 samples, 2 upkeeps")
    parser.add_argument("--merges", type=int, help="merges (full run: 10,000)")
    args = parser.parse_args()
    merges = args.merges or (400 if args.quick else 10_000)
    work = Path(tempfile.mkdtemp(prefix="compactor-catalog-growth-"))
    try:
        payload = run(work, merges)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_results("catalog_growth", args.quick, payload)
    if payload["failures"]:
        print("FAILED: " + "; ".join(payload["failures"]))
        raise SystemExit(1)


if __name__ == "__main__":
    main()

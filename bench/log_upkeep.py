"""A table only delta-rs loads, kept cheap to open by the job's checkpoints.

delta-rs writes no checkpoint: a table it alone loads grows a JSON commit per load, and every
reader replays them all. Here one job (`compactor run`, local[2]) merges such a table (`minor`
[2, 0]: two loads make one merge) and keeps its log: its maintainer checkpoints the table when
more than `checkpoint_every` (K = 10) JSON commits have piled up since the last checkpoint, off
the merge's commit path. One table under a local warehouse takes N loads through `ArrowLoader`
(1,000; --quick: 40), each waiting while more than 12 merges are owed (the pace the job keeps).

A sampler reads the table's `_delta_log` every 0.2 s: the newest version, the newest
checkpoint's, and the JSON commits since it; the most it saw is printed against K plus the
maintainer's lag. The job's own gauge of the same count and its checkpoint counter are read from
its /metrics.

At the end, with the job stopped, the table is opened cold, each way timed alternately (median of
9, each table opened first in turn): as the job kept it; a copy freshly checkpointed at its newest
version (the baseline); and a copy without its checkpoints (as delta-rs alone leaves a table).
Two readers:
- delta-rs: `DeltaTable(path)` and its file list;
- delta-spark: the `DeltaLog` cache cleared, the newest snapshot and its file count (a state
  reconstruction).
Target: as kept <= 1.5x freshly checkpointed, for both readers.

Run: .venv/bin/python bench/log_upkeep.py [--quick]; saves bench/results/log_upkeep[_quick].json.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.job_process import JobProcess, run_args
from harness.report import bench_parser, print_table, save_results
from harness.services import kafka_bootstrap
from harness.targets import Target, judge

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from compactor.client.arrow_loader import ArrowLoader

K = 10  # checkpoint_every, Delta's own interval
MAX_OWED = 12  # merges owed before the loader waits
STALL_S = 120.0  # no merge for this long while some are owed: the run has failed
REPEATS = 9  # a multiple of the three tables: each is opened first equally often
READERS = ("delta-rs", "delta-spark")
TARGETS = tuple(
    Target(f"{reader}_kept_vs_fresh", f"a cold {reader} open as kept / freshly checkpointed", 1.5, unit="x")
    for reader in READERS
)
TABLE = "events"
START = datetime(2026, 1, 1, tzinfo=UTC)


class LogWatch:
    """The table's log as a reader finds it: newest version, newest checkpoint, merges committed."""

    def __init__(self, table: Path) -> None:
        self.log = table / "_delta_log"
        self.merges = 0
        self.latest = -1
        self.checkpointed = -1
        self.most_behind = 0  # JSON commits since the newest checkpoint, the most seen
        self.samples = 0
        self.errors = 0
        self._read = -1  # the newest commit file read for its metadata
        self.stop = threading.Event()

    def sample(self) -> None:
        if not self.log.exists():
            return
        versions, checkpoints = [], []
        for path in self.log.iterdir():
            name = path.name
            if name.endswith(".json") and name[:20].isdigit():
                versions.append(int(name[:20]))
            elif ".checkpoint" in name and name.endswith(".parquet"):
                checkpoints.append(int(name[:20]))
        if not versions:
            return
        self.latest = max(versions)
        self.checkpointed = max(checkpoints, default=-1)
        for version in range(self._read + 1, self.latest + 1):
            merge = self._is_merge(version)
            if merge is None:
                break  # not readable yet: read again at the next sample
            self.merges += merge
            self._read = version
        self.most_behind = max(self.most_behind, self.latest - self.checkpointed)
        self.samples += 1

    def _is_merge(self, version: int) -> bool | None:
        """Is the commit a merge (None: it could not be read or parsed)?"""
        from compactor.delta.log.commit_metadata import parse_metadata

        try:
            lines = (self.log / f"{version:020d}.json").read_text().splitlines()
            for line in lines:
                info = json.loads(line).get("commitInfo")
                if info is not None:
                    meta = parse_metadata(info.get("userMetadata"))
                    return meta is not None and meta.get("op") == "merge"
        except (OSError, ValueError):
            return None
        return False

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.sample()
            except Exception as exc:  # a sampler that died would freeze the merge count: say it, go on
                self.errors += 1
                if self.errors == 1:
                    print(f"  log sampler: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def config_yaml() -> str:
    return (
        f"defaults:\n  rules:\n    - rule: minor\n      level_thresholds: [2, 0]\n  checkpoint_every: {K}\n"
    )


class Stalled(Exception):
    """The job died, or merged nothing for STALL_S while merges were owed."""


def wait_for_merges(watch: LogWatch, job: JobProcess, wanted: int) -> float:
    """Until the table holds `wanted` merges; the seconds waited. Raises `Stalled` rather than
    wait out the caller's timeout with nothing to show for it."""
    began = last_progress = time.monotonic()
    seen = watch.merges
    while watch.merges < wanted:
        now = time.monotonic()
        if watch.merges != seen:
            seen, last_progress = watch.merges, now
        if not job.alive():
            raise Stalled(f"the job exited with {watch.merges} of {wanted} merges made")
        if now - last_progress > STALL_S:
            raise Stalled(f"no merge for {STALL_S:.0f}s with {watch.merges} of {wanted} made")
        time.sleep(0.1)
    return time.monotonic() - began


def load_all(loader: ArrowLoader, watch: LogWatch, job: JobProcess, loads: int, rows: int) -> float:
    """`loads` loads of the table, each waiting while more than MAX_OWED merges are owed; the
    seconds spent waiting for the job."""
    import pyarrow as pa

    waited = 0.0
    for n in range(loads):
        waited += wait_for_merges(watch, job, n // 2 - MAX_OWED)
        start = START + timedelta(hours=n)
        frame = pa.table({"k": list(range(rows)), "v": [n] * rows})
        loader.load(TABLE, frame, start, start + timedelta(hours=1), segment_id=f"l{n:06d}")
    return waited


def copies(table: Path, work: Path, spark: SparkSession) -> dict[str, Path]:
    """The table as kept, freshly checkpointed at its newest version, and without checkpoints."""
    from compactor.delta.commit.log_upkeep import write_checkpoint

    fresh, bare = work / "fresh", work / "bare"
    shutil.copytree(table, fresh)
    shutil.copytree(table, bare)
    write_checkpoint(spark, str(fresh))
    for path in (bare / "_delta_log").iterdir():
        if ".checkpoint" in path.name or path.name == "_last_checkpoint":
            path.unlink()
    return {"as kept": table, "freshly checkpointed": fresh, "without checkpoints": bare}


def open_rust(path: Path) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(str(path)).file_uris())


def open_spark(spark: SparkSession, path: Path) -> int:
    from compactor.delta.files import jvm_class
    from compactor.delta.log.snapshot import newest_snapshot

    jvm_class(spark._jvm, "org.apache.spark.sql.delta.DeltaLog").clearCache()
    return int(newest_snapshot(spark, str(path))[1].numOfFiles())


def cold_opens(tables: dict[str, Path], readers: dict[str, Callable[[Path], int]]) -> dict[str, Any]:
    """Median seconds of each reader's cold open of each table, timed alternately; the order turns
    at each repeat, so that no table is always the first opened after the other reader (which
    pays for the switch: two copies of one log measured 2.3x apart when always opened in turn)."""
    times: dict[tuple[str, str], list[float]] = {(r, t): [] for r in readers for t in tables}
    files: dict[tuple[str, str], int] = {}
    names = list(tables)
    for repeat in range(REPEATS):
        turn = repeat % len(names)
        for reader, open_table in readers.items():
            for name in names[turn:] + names[:turn]:
                path = tables[name]
                began = time.perf_counter()
                files[(reader, name)] = open_table(path)
                times[(reader, name)].append(time.perf_counter() - began)
    out: dict[str, Any] = {}
    for reader in readers:
        medians = {t: statistics.median(times[(reader, t)]) for t in tables}
        out[reader] = {
            "median_s": {t: round(s, 4) for t, s in medians.items()},
            "files": {t: files[(reader, t)] for t in tables},
            "kept_vs_fresh": round(medians["as kept"] / medians["freshly checkpointed"], 2),
            "bare_vs_fresh": round(medians["without checkpoints"] / medians["freshly checkpointed"], 2),
        }
    return out


def main() -> None:
    parser = bench_parser(__doc__, "60 loads")
    parser.add_argument("--loads", type=int, help="loads of the table (full run: 1,000)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (the job's log, the table)"
    )
    args = parser.parse_args()
    loads = args.loads or (40 if args.quick else 1000)
    work = Path(tempfile.mkdtemp(prefix="compactor-log-upkeep-"))
    try:
        payload = run(work, loads)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    payload["quick"] = args.quick
    save_results("log_upkeep", args.quick, payload)
    if payload["failures"]:
        print("FAILED: " + "; ".join(payload["failures"]))
        raise SystemExit(1)


def run(work: Path, loads: int) -> dict[str, Any]:
    from compactor.client.arrow_loader import ArrowLoader
    from compactor.kafka.settings import KafkaSettings
    from compactor.kafka.topics import ensure_topics
    from compactor.spark.session import build_spark

    warehouse = work / "warehouse"
    table = warehouse / TABLE
    config = work / "tables.yaml"
    config.write_text(config_yaml())
    watch = LogWatch(table)
    with kafka_bootstrap(work) as bootstrap:
        prefix = f"log-upkeep-{uuid.uuid4().hex[:6]}"
        kafka = KafkaSettings(bootstrap, f"{prefix}.segments", f"{prefix}.results", f"{prefix}.dead")
        ensure_topics(kafka, [kafka.segments_topic, kafka.results_topic, kafka.dead_letter_topic])
        job = JobProcess(
            [*run_args(config, warehouse, work / "checkpoint", kafka), "--master", "local[2]"],
            work / "job.log",
        ).start()
        sampler = threading.Thread(target=watch.run, daemon=True)
        sampler.start()
        loader = ArrowLoader(
            warehouse, bootstrap, segments_topic=kafka.segments_topic, results_topic=kafka.results_topic
        )
        try:
            began = time.monotonic()
            waited = load_all(loader, watch, job, loads, rows=20)
            load_s = time.monotonic() - began
            wait_for_merges(watch, job, loads // 2)
            print(f"  {loads // 2} merges after {time.monotonic() - began:.0f}s", flush=True)
            time.sleep(3 * 5)  # the maintainer's round after the last merge
            watch.sample()
            gauge = job.samples("compactor_log_commits_since_checkpoint")
            checkpoints = job.metric("compactor_checkpoints_total")
        except Stalled as exc:
            print(f"  stalled: {exc}; the job's log ends:", file=sys.stderr, flush=True)
            print(job.log_end(40), file=sys.stderr)
            return {"loads": loads, "merges": watch.merges, "failures": [str(exc)]}
        finally:
            watch.stop.set()
            loader.close()
            job.kill()
    print(
        f"{loads:,} loads in {load_s:.0f}s ({waited:.0f}s waiting for merges), {watch.merges} merges; "
        f"the log at version {watch.latest}, last checkpoint {watch.checkpointed}; "
        f"JSON commits since a checkpoint: at most {watch.most_behind} (K = {K}); "
        f"the job's checkpoints {checkpoints:.0f}",
        flush=True,
    )
    spark = build_spark("bench-log-upkeep", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        tables = copies(table, work, spark)
        opens = cold_opens(tables, {"delta-rs": open_rust, "delta-spark": lambda p: open_spark(spark, p)})
    finally:
        spark.stop()
    print_table(
        ["reader", *[f"{t} (s)" for t in tables], "kept / fresh", "bare / fresh"],
        [
            [
                r,
                *[o["median_s"][t] for t in tables],
                f"{o['kept_vs_fresh']:.2f}x",
                f"{o['bare_vs_fresh']:.2f}x",
            ]
            for r, o in opens.items()
        ],
    )
    verdicts = judge(TARGETS, {f"{r}_kept_vs_fresh": opens[r]["kept_vs_fresh"] for r in READERS})
    return {
        "loads": loads,
        "rows_per_load": 20,
        "merges": watch.merges,
        "load_seconds": round(load_s, 1),
        "waited_for_merges_s": round(waited, 1),
        "log": {
            "latest_version": watch.latest,
            "last_checkpoint": watch.checkpointed,
            "json_commits_since_checkpoint_max": watch.most_behind,
            "samples": watch.samples,
            "checkpoint_every": K,
            "job_gauge_at_end": gauge,
            "job_checkpoints": checkpoints,
        },
        "cold_open": opens,
        "verdicts": verdicts,
        "failures": [],
    }


if __name__ == "__main__":
    main()

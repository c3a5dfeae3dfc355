"""Capacity: how fast one job drains a warehouse's backlog with merges side by side, and what a
steady load costs while one table runs a 1 GiB merge, at max_concurrent_merges 1, 4 and 8.

Segments are written without Spark, by delta-rs (the `deltalake` package), each commit with
the load record a loader leaves, so that loading does not compete with the job; their
`SegmentCompleted` events go on a real Kafka topic (a LocalKafkaBroker unless
KAFKA_BOOTSTRAP_SERVERS is set). Each run is a process of its own (its own Spark, local[2]
unless said): the job is `build_handler` + `start_query` with a 0.5 s trigger, as in
latency.py, and its driver tree's CPU time and peak resident memory are measured.

- **Drain**: T tables x S small segments each (1,000 x 16; --quick 8 x 4), every event on
  the topic before the job starts, rule `minor` with level_thresholds [S, 0] (one merge of S
  segments per table). Measured from the query's start to the last table's merge committed
  and announced: merges/s, segments compacted/s, CPU-seconds per merge, peak RSS, and the
  batch phases. At concurrency 1, 4 and 8 on local[2], and at 4 on a standalone cluster of
  two workers (one core each) on this machine, the driver beside them. Then by two jobs of
  one core each (local[1], concurrency 2) sharing the warehouse in two shards
  (`harness/two_jobs.py`): the cost of sharding on one machine.
  Then at 4 again with the merges' content certificates off (`operations.certify_merges`), and
  once more with them on: what proving each merge's rows costs, in CPU-seconds per merge (the
  mean of the two drains with them, which bracket the one without).
- **Steady**: pairs of loads into the same T tables (rule `minor` [2, 0]: a pair makes one
  merge), at half the drain rate measured at concurrency 1, first at concurrency 1, then at
  4 (--quick: at 4 only). Per merge: event -> commit (the second load's event is produced -> the merge's Delta
  commit timestamp). A window before, and one while table `big` merges its two 512 MiB
  segments. Merge debt (unmerged pairs) sampled each second; its slope per minute.

Targets (`TARGETS`, judged at concurrency 4): the drain rate, its speed-up over concurrency 1, a
small table's p99 event -> commit while the 1 GiB merge runs, CPU-seconds, Spark jobs and state
rebuilds per merge, SetTransactions left; flat debt at the steady rate (printed).

Run: .venv/bin/python bench/capacity.py [--quick] [--tables N] [--segments S] [--no-cluster]
Saves bench/results/capacity[_quick].json and bench/results/capacity[_quick].png.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import psutil
from deltalake import DeltaTable

from compactor.codec.events import default_codec
from compactor.domain.events import CompactionRequested
from compactor.observe.metrics.spark_work import RETAIN, SparkWork
from compactor.observe.metrics.spark_work import describe as describe_work
from harness.loads import START, bench_topics, completed, segment_table, write_segments
from harness.probes import PeakRss, Tree
from harness.report import MIB, bench_parser, machine_info, percentiles, print_table, save_results
from harness.services import kafka_bootstrap
from harness.targets import Target, judge
from harness.two_jobs import shard_setup, shard_tables, two_job_drain

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from compactor.job.query import Shard
    from compactor.kafka.producer import EventProducer
    from compactor.kafka.settings import KafkaSettings
    from compactor.observe.metrics.job_metrics import JobMetrics
    from compactor.stream.handler import BatchHandler

TARGETS = (
    Target("drain_c4", "drain at concurrency 4", 3.0, at_most=False, unit=" merges/s"),
    Target("speedup_4_vs_1", "drain speed-up at concurrency 4 vs 1", 1.5, at_most=False, unit="x"),
    Target(
        "p99_beside_big_ms",
        "small table p99 event -> commit while the 1 GiB merge runs (c=4)",
        3000,
        unit=" ms",
    ),
    Target("set_transactions", "live SetTransactions left by the merges", 0),
    Target("cpu_seconds_per_merge_c4", "CPU-seconds per merge at concurrency 4", 0.4),
    Target("spark_jobs_per_merge_c4", "Spark jobs per small merge", 2),
    Target("state_rebuilds_per_merge_c4", "Delta state rebuilds per merge", 0),
    Target(
        "certificate_cpu_ratio_c4",
        "CPU-seconds per merge with content certificates / without (c=4)",
        1.1,
        unit="x",
    ),
)
ROWS_PER_SEGMENT = 200
WARM_UP_HOURS = 100_000  # the warm-up pair's hours: far from every pair the steady run loads
BIG_SEGMENT_BYTES = 512 * MIB
CONCURRENCY = (1, 4, 8)
TRIGGER = "500 milliseconds"
BENCH = Path(__file__).parent


# -- one run in a process of its own -------------------------------------------------------------


def _job(
    master: str,
    concurrency: int,
    level: int,
    warehouse: Path,
    kafka: KafkaSettings,
    shard: int | None = None,
    certify: bool = True,
) -> tuple[SparkSession, BatchHandler, JobMetrics, float, Shard | None]:
    """The job as `compactor run` wires it: Spark, the handler (recovered), its metrics (and the
    shard it runs, if one of two); `certify=False`: its merges commit without certificates. Table
    `big` merges only when asked (its 1 GiB merge starts when the steady run says)."""
    from compactor.config.loading import load_config
    from compactor.job.wiring import build_handler
    from compactor.kafka.producer import EventProducer
    from compactor.observe.metrics.job_metrics import JobMetrics
    from compactor.spark.session import build_spark

    config = load_config(
        {
            "defaults": {"rules": [{"rule": "minor", "level_thresholds": [level, 0]}]},
            # `big` merges when asked, and rewrites its gigabyte (its 512 MiB files would otherwise
            # move into the output unrewritten: promote_files_over)
            "tables": {
                "big": {
                    "rules": [{"rule": "minor", "level_thresholds": [2, 0], "trigger": "manual"}],
                    "promote_files_over": None,
                }
            },
            "operations": {"max_concurrent_merges": concurrency, "certify_merges": certify},
        }
    )
    spark = build_spark("capacity", master=master, locations=(str(warehouse),), extra_conf=RETAIN)
    spark.sparkContext.setLogLevel("ERROR")
    metrics = JobMetrics()
    began = time.perf_counter()
    job_shard = shard_setup(config, kafka, warehouse, shard) if shard is not None else None
    handler = build_handler(
        spark, config, warehouse, kafka, EventProducer(kafka), metrics=metrics, shard=job_shard
    )
    metrics.watch(handler.view())
    return spark, handler, metrics, time.perf_counter() - began, job_shard


def _phases(metrics: JobMetrics) -> dict[str, float]:
    from compactor.stream.reporting import BATCH_PHASES

    value = metrics.registry.get_sample_value
    return {p: value("compactor_batch_phase_seconds_sum", {"phase": p}) or 0.0 for p in BATCH_PHASES}


def drain_worker(args: argparse.Namespace) -> dict[str, Any]:
    from compactor.job.query import start_query
    from compactor.kafka.producer import EventProducer

    kafka = bench_topics(args.bootstrap, args.prefix)
    warehouse = Path(args.warehouse)
    segments = json.loads(Path(args.segments_file).read_text())
    spark, handler, metrics, recovery, shard = _job(
        args.master, args.concurrency, args.level, warehouse, kafka, args.shard, not args.uncertified
    )
    if not args.produced:
        producer = EventProducer(kafka)
        producer.send_all([(kafka.segments_topic, t, bytes.fromhex(v), None) for t, v in segments])
        producer.close()
    tree = Tree(psutil.Process())
    names = {t for t, _ in segments}
    if args.shard is not None:  # one of the two-job drain's jobs: its shard's tables
        names = shard_tables(names, args.shard)
        segments = [s for s in segments if s[0] in names]
    tables = len(names)
    with PeakRss() as rss:
        work = SparkWork(spark)
        cpu0, t0, started_at = tree.cpu() - rss.own_cpu, time.perf_counter(), time.time()
        query = start_query(
            spark,
            handler,
            kafka,
            Path(args.warehouse).parent / "checkpoint",
            trigger_interval=TRIGGER,
            shard=shard,
        )
        while handler.stats.merges < tables or handler.merges.inflight.running():
            if not query.isActive:
                raise RuntimeError(f"the streaming query stopped: {query.exception()}")
            if time.perf_counter() - t0 > args.timeout:
                raise TimeoutError(f"{handler.stats.merges} of {tables} merges after {args.timeout:.0f}s")
            time.sleep(0.05)
        # the job's CPU: the tree's, less what the memory probe beside it used
        seconds, cpu, ended_at = time.perf_counter() - t0, tree.cpu() - rss.own_cpu - cpu0, time.time()
    query.stop()
    handler.drain(60)
    merges = handler.stats.merges
    return {
        "concurrency": args.concurrency,
        "master": args.master,
        "certified": not args.uncertified,
        "tables": tables,
        "segments": len(segments),
        "merges": merges,
        "failed": handler.stats.failed_merges,
        "recovery_seconds": recovery,
        "seconds": seconds,
        "merges_per_s": merges / seconds,
        "segments_per_s": len(segments) / seconds,
        "cpu_seconds": cpu,
        "cpu_seconds_per_merge": cpu / merges,
        "peak_rss_mib": rss.peak_mib,
        "phases": _phases(metrics),
        "batches": int(metrics.registry.get_sample_value("compactor_batch_duration_seconds_count") or 0),
        "spark_work": work.summary(merges),
        "set_transactions": _set_transactions(warehouse),
        "started_at": started_at,
        "ended_at": ended_at,
    }


def steady_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Pairs of loads at `rate` merges/s; the 1 GiB merge asked for at `big_at` seconds."""
    from compactor.job.query import start_query
    from compactor.kafka.producer import EventProducer

    kafka = bench_topics(args.bootstrap, args.prefix)
    warehouse = Path(args.warehouse)
    big = json.loads(Path(args.segments_file).read_text())  # the 1 GiB table's two events
    ask = default_codec().encode_compaction_requested(
        CompactionRequested("bench", "big", datetime.now(UTC), "minor")
    )
    spark, handler, _, _, _ = _job(args.master, args.concurrency, 2, warehouse, kafka)
    query = start_query(spark, handler, kafka, warehouse.parent / "checkpoint", trigger_interval=TRIGGER)
    producer = EventProducer(kafka)
    producer.send_all([(kafka.segments_topic, t, bytes.fromhex(v), None) for t, v in big])  # known, waiting
    _warm_up(producer, kafka, warehouse)
    sent: dict[str, float] = {}  # the pair's second segment id -> when its event was produced (epoch s)
    debt: list[tuple[float, int]] = []
    rng = random.Random(7)
    began = time.time()
    big_sent: float | None = None
    pair = 0
    stop = threading.Event()

    def sample_debt() -> None:
        while not stop.wait(1.0):
            with handler.lock:  # the catalog as the job's thread leaves it
                catalog = handler.catalog
                unmerged = sum(1 for t in catalog.table_names for s in catalog.segments(t) if s.level == 0)
            debt.append((time.time() - began, unmerged))

    sampler = threading.Thread(target=sample_debt, daemon=True)
    sampler.start()
    next_at = began
    while time.time() - began < args.seconds:
        if big_sent is None and time.time() - began >= args.big_at:
            producer.send_all([(kafka.segments_topic, "big", ask, None)])
            big_sent = time.time() - began
        table = f"t{rng.randrange(args.tables):04d}"
        hours = [2 * pair, 2 * pair + 1]
        loads = write_segments(str(warehouse / table), table, hours, ROWS_PER_SEGMENT)
        producer.send_all(
            [
                (kafka.segments_topic, s.table, v, None)
                for s, (_, _, v, _) in zip(loads, completed(loads), strict=True)
            ]
        )
        sent[loads[-1].id] = time.time()
        pair += 1
        next_at += 1 / args.rate
        time.sleep(max(0.0, next_at - time.time()))
    deadline = time.time() + args.timeout
    while handler.merges.inflight.running() or (big_sent is not None and not _merged(warehouse / "big")):
        if time.time() > deadline:
            break
        time.sleep(0.2)
    stop.set()
    query.stop()
    handler.drain(120)
    producer.close()
    samples = []
    big_commit = None
    for table_dir in sorted(warehouse.iterdir()):
        for _, info in _merge_commits(table_dir):
            if table_dir.name == "big":
                big_commit = info["timestamp"] / 1000 - began
                continue
            last = max(json.loads(info["userMetadata"])["removed"])
            if last in sent:
                samples.append({"at": sent[last] - began, "ms": info["timestamp"] - sent[last] * 1000})
    before = [s["ms"] for s in samples if big_sent is None or s["at"] < big_sent]
    during = [
        s["ms"]
        for s in samples
        if big_sent is not None and big_commit is not None and big_sent <= s["at"] <= big_commit
    ]
    return {
        "concurrency": args.concurrency,
        "rate_merges_per_s": args.rate,
        "pairs": pair,
        "merged": len(samples),
        "big_sent_s": big_sent,
        "big_committed_s": big_commit,
        "event_to_commit_before_ms": percentiles(before),
        "event_to_commit_during_big_ms": percentiles(during),
        "debt": debt,
        "debt_slope_per_min": _slope(debt) * 60,
        "debt_slope_during_big_per_min": _slope(
            [d for d in debt if big_sent and big_commit and big_sent <= d[0] <= big_commit]
        )
        * 60,
    }


def _warm_up(producer: EventProducer, kafka: KafkaSettings, warehouse: Path, timeout: float = 180.0) -> None:
    """One pair merged before the clock starts, as `latency.py` keeps its warm-up apart: the
    job's first batch and first merge pay Spark's warm-up (start-up reads the catalog without
    Spark), several seconds that would otherwise land on the first samples."""
    table = "t0000"
    loads = write_segments(
        str(warehouse / table), table, [WARM_UP_HOURS, WARM_UP_HOURS + 1], ROWS_PER_SEGMENT
    )
    producer.send_all([(kafka.segments_topic, table, v, None) for _, _, v, _ in completed(loads)])
    deadline = time.time() + timeout
    while not _merge_commits(warehouse / table) and time.time() < deadline:
        time.sleep(0.2)


def _merge_commits(table_dir: Path) -> list[tuple[int, dict[str, Any]]]:
    found = []
    for path in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and '"op":"merge"' in (info.get("userMetadata") or ""):
                found.append((int(path.stem), info))
    return found


def _set_transactions(warehouse: Path) -> int:
    """The `txn` actions every table's commit files hold (the job wrote one per merge before
    direct commits; none now)."""
    return sum(
        1
        for path in warehouse.glob("*/_delta_log/*.json")
        for line in path.read_text().splitlines()
        if line.startswith('{"txn"')
    )


def _merged(table_dir: Path) -> bool:
    return table_dir.exists() and bool(_merge_commits(table_dir))


def _slope(points: list[tuple[float, int]]) -> float:
    if len(points) < 2:
        return 0.0
    xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points], dtype=float)
    return float(np.polyfit(xs, ys, 1)[0])


# -- the orchestration ------------------------------------------------------------------------------


def run_worker(kind: str, out: Path, **options: object) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__)), "--worker", kind, "--out", str(out)]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    log = out.with_suffix(".log")
    with log.open("w") as err:
        done = subprocess.run(cmd, stdout=err, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        lines = log.read_text(errors="replace").splitlines()  # a JVM trace's frames hide its cause
        tail = [line for line in lines if not line.startswith("\tat ")][-40:]
        raise RuntimeError(f"{kind} run failed ({done.returncode}):\n" + "\n".join(tail))
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def prepare(template: Path, tables: int, segments: int) -> list[list[str]]:
    """T tables of S segments in `template` (delta-rs), and their events (table, hex bytes)."""
    events = []
    for i in range(tables):
        table = f"t{i:04d}"
        loaded = write_segments(str(template / table), table, list(range(segments)), ROWS_PER_SEGMENT)
        events += [[t, v.hex()] for t, _, v, _ in completed(loaded)]
    return events


def prepare_big(warehouse: Path) -> list[list[str]]:
    """Table `big`: two segments of 512 MiB (random payload, so they do not compress)."""
    payload = 1024
    rows = BIG_SEGMENT_BYTES // (payload + 16)
    loaded = []
    for h in (0, 1):  # one append each: each table write holds one segment's rows in memory
        loaded += write_segments(str(warehouse / "big"), "big", [h], rows, payload)
    return [[t, v.hex()] for t, _, v, _ in completed(loaded)]


def certificate_cpu_ratio(drains: list[dict[str, Any]]) -> float:
    """CPU-seconds a merge at concurrency 4 with content certificates (the mean of the drains
    with them on local[2]) over the same without them."""
    at4 = [d for d in drains if d["master"] == "local[2]" and d["concurrency"] == 4]
    on = [d["cpu_seconds_per_merge"] for d in at4 if d.get("certified", True)]
    off = [d["cpu_seconds_per_merge"] for d in at4 if not d.get("certified", True)]
    return float(np.mean(on) / np.mean(off))


def main() -> None:
    parser = bench_parser(
        __doc__, "8 tables x 4 segments at concurrency 1 and 4; 30 s steady runs beside a 64 MiB merge"
    )
    parser.add_argument("--tables", type=int)
    parser.add_argument("--segments", type=int)
    parser.add_argument("--no-cluster", action="store_true", help="skip the standalone-cluster drain")
    # one run, in a process of its own (what the orchestration passes down)
    parser.add_argument("--worker", choices=["recover", "drain", "steady"], help=argparse.SUPPRESS)
    for name in ("out", "bootstrap", "prefix", "warehouse", "segments-file", "master"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    for name in ("concurrency", "level", "shard", "produced", "uncertified"):
        parser.add_argument(f"--{name}", type=int, help=argparse.SUPPRESS)
    for name in ("rate", "seconds", "big-at", "timeout"):
        parser.add_argument(f"--{name}", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        workers = {"recover": recover_worker, "drain": drain_worker, "steady": steady_worker}
        Path(args.out).write_text(json.dumps(workers[args.worker](args), default=str))
        return
    orchestrate(args)


def recover_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The job's start-up on a fresh warehouse: every table read once into the catalog, which is
    saved with it; the runs start from copies, as a job restarted on a known warehouse does."""
    kafka = bench_topics(args.bootstrap, args.prefix)
    _, handler, _, seconds, _ = _job(args.master or "local[2]", 1, args.level, Path(args.warehouse), kafka)
    handler.close()
    return {"recovery_seconds": seconds, "tables": len(handler.catalog.table_names)}


def orchestrate(args: argparse.Namespace) -> None:
    quick = args.quick
    tables = args.tables or (8 if quick else 1000)
    segments = args.segments or (4 if quick else 16)
    levels = (1, 4) if quick else CONCURRENCY
    work = Path(tempfile.mkdtemp(prefix="capacity-"))
    try:
        with kafka_bootstrap(work) as bootstrap:
            drains, steady = measure(args, work, bootstrap, tables, segments, levels)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(quick, tables, segments, drains, steady)


def measure(
    args: argparse.Namespace, work: Path, bootstrap: str, tables: int, segments: int, levels: tuple[int, ...]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The drains (each level on local[2], then 4 on the cluster), then the steady runs."""
    quick = args.quick
    print(f"writing {tables} tables x {segments} segments with delta-rs ...", flush=True)
    began = time.perf_counter()
    events = prepare(work / "template", tables, segments)
    recovered = run_worker(
        "recover",
        work / "recover.json",
        bootstrap=bootstrap,
        prefix="cap-recover",
        warehouse=work / "template",
        level=segments,
    )
    print(
        f"  {time.perf_counter() - began:.0f}s (the job's first start-up: {recovered['recovery_seconds']:.0f}s)"
    )
    (work / "drain-events.json").write_text(json.dumps(events))
    drains = []
    runs = [("local[2]", c) for c in levels] + ([] if quick or args.no_cluster else [("cluster", 4)])
    for master, c in runs:
        drains.append(drain_run(work, bootstrap, master, c, segments))
        d = drains[-1]
        print(
            f"drain {master} c={c}: {d['merges']} merges in {d['seconds']:.1f}s = {d['merges_per_s']:.2f} merges/s, "
            f"{d['cpu_seconds_per_merge']:.2f} CPU-s/merge, peak RSS {d['peak_rss_mib']:.0f} MiB",
            flush=True,
        )
        if "spark_work" in d:
            print(f"  {describe_work(d['spark_work'])}", flush=True)
    # the same drain by two jobs of one core each, sharing the warehouse in two shards
    drains.append(two_job_drain(work, bootstrap, segments, 2, run_worker, events))
    two, one = drains[-1], next(d for d in drains if d["concurrency"] == 4 and d["master"] == "local[2]")
    print(
        f"drain 2 jobs x local[1], c=2 each: {two['merges_per_s']:.2f} merges/s "
        f"({two['merges_per_s'] / one['merges_per_s']:.2f}x one job on local[2] at c=4)",
        flush=True,
    )
    # what the merges' content certificates cost: the drain at 4 again with them off, then with
    # them on once more, so that the runs with them bracket the one without (a drain's CPU a merge
    # drifts by a tenth from one process to the next, more than the certificates cost)
    drains.append(drain_run(work, bootstrap, "local[2]", 4, segments, certify=False))
    off = drains[-1]
    drains.append(drain_run(work, bootstrap, "local[2]", 4, segments, repeat=True))
    print(
        f"drain local[2] c=4, no certificates: {off['merges_per_s']:.2f} merges/s, "
        f"{off['cpu_seconds_per_merge']:.2f} CPU-s/merge; with them, before and after: "
        f"{one['cpu_seconds_per_merge']:.2f} and {drains[-1]['cpu_seconds_per_merge']:.2f} "
        f"({certificate_cpu_ratio(drains):.2f}x the CPU)",
        flush=True,
    )
    base = next(d for d in drains if d["concurrency"] == 1 and d["master"] == "local[2]")
    rate = base["merges_per_s"] / 2
    template = steady_template(work, bootstrap, tables, quick)
    steady = [
        steady_run(work, template, bootstrap, c, tables, rate, quick) for c in ((4,) if quick else (1, 4))
    ]
    return drains, steady


def drain_run(
    work: Path,
    bootstrap: str,
    master: str,
    concurrency: int,
    level: int,
    certify: bool = True,
    repeat: bool = False,
) -> dict[str, Any]:
    """One drain in a process of its own; `repeat`: a second drain of the same settings (its own
    warehouse copy and checkpoint), marked so in its result."""
    name = f"drain-{master.strip('[]').replace('[', '')}-{concurrency}{'' if certify else '-uncertified'}"
    name += "-again" if repeat else ""
    run = work / name
    shutil.copytree(work / "template", run / "warehouse")
    options: dict[str, Any] = dict(
        bootstrap=bootstrap,
        prefix=f"cap-{uuid.uuid4().hex[:8]}",
        warehouse=run / "warehouse",
        segments_file=work / "drain-events.json",
        concurrency=concurrency,
        level=level,
        timeout=7200,
        uncertified=int(not certify),
    )
    try:
        if master == "cluster":
            from compactor.dev.spark_cluster import standalone_cluster

            with standalone_cluster(run / "cluster", cores=1, memory="2g", workers=2) as cluster:
                return run_worker("drain", run / "result.json", master=cluster.master_url, **options)
        return {**run_worker("drain", run / "result.json", master=master, **options), "repeat": repeat}
    finally:
        shutil.rmtree(run / "warehouse", ignore_errors=True)


def steady_template(work: Path, bootstrap: str, tables: int, quick: bool) -> Path:
    """The steady runs' warehouse: T empty tables and `big`, read once by a job's start-up."""
    template = work / "steady-template"
    template.mkdir(parents=True)
    schema = segment_table(["x"], [START], 1).schema
    for i in range(tables):  # empty tables, known to the job before the loads begin
        DeltaTable.create(str(template / f"t{i:04d}"), schema, partition_by=["segment_id"])
    big = prepare_big(template) if not quick else _small_big(template)
    (work / "big.json").write_text(json.dumps(big))
    run_worker(
        "recover",
        work / "steady-recover.json",
        bootstrap=bootstrap,
        prefix="cap-recover",
        warehouse=template,
        level=2,
    )
    return template


def steady_run(
    work: Path, template: Path, bootstrap: str, concurrency: int, tables: int, rate: float, quick: bool
) -> dict[str, Any]:
    run = work / f"steady-{concurrency}"
    shutil.copytree(template, run / "warehouse")
    seconds, big_at = (30.0, 10.0) if quick else (240.0, 90.0)
    result = run_worker(
        "steady",
        run / "result.json",
        bootstrap=bootstrap,
        prefix=f"cap-{uuid.uuid4().hex[:8]}",
        warehouse=run / "warehouse",
        segments_file=work / "big.json",
        master="local[2]",
        concurrency=concurrency,
        tables=tables,
        rate=rate,
        seconds=seconds,
        big_at=big_at,
        timeout=900,
    )
    shutil.rmtree(run, ignore_errors=True)
    b, d = result["event_to_commit_before_ms"], result["event_to_commit_during_big_ms"]
    print(
        f"steady c={concurrency} at {rate:.2f} merges/s: p50/p99 before {_ms(b['p50'])}/{_ms(b['p99'])} ms, while the "
        f"big merge runs {_ms(d['p50'])}/{_ms(d['p99'])} ms; debt slope {result['debt_slope_per_min']:+.2f}/min",
        flush=True,
    )
    return result


def _small_big(warehouse: Path) -> list[list[str]]:
    loaded = []
    for h in (0, 1):
        loaded += write_segments(str(warehouse / "big"), "big", [h], 32 * MIB // 1040, 1024)
    return [[t, v.hex()] for t, _, v, _ in completed(loaded)]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def report(
    quick: bool, tables: int, segments: int, drains: list[dict[str, Any]], steady: list[dict[str, Any]]
) -> None:
    print()
    print_table(
        [
            "master",
            "concurrency",
            "merges",
            "seconds",
            "merges/s",
            "segments/s",
            "CPU-s/merge",
            "peak RSS MiB",
        ],
        [
            [
                d["master"] + ("" if d.get("certified", True) else ", no certificates"),
                d["concurrency"],
                d["merges"],
                d["seconds"],
                d["merges_per_s"],
                d["segments_per_s"],
                d["cpu_seconds_per_merge"],
                d["peak_rss_mib"],
            ]
            for d in drains
        ],
        left=(0,),
    )
    local = {
        d["concurrency"]: d
        for d in drains
        if d["master"] == "local[2]" and d.get("certified", True) and not d.get("repeat")
    }
    certificate_cost = certificate_cpu_ratio(drains)
    at4 = local[4]["merges_per_s"]
    speedup = at4 / local[1]["merges_per_s"]
    print()
    print_table(
        [
            "concurrency",
            "rate merges/s",
            "p50 before",
            "p99 before",
            "p50 during 1 GiB",
            "p99 during 1 GiB",
            "debt slope/min",
        ],
        [
            [
                s["concurrency"],
                s["rate_merges_per_s"],
                s["event_to_commit_before_ms"]["p50"],
                s["event_to_commit_before_ms"]["p99"],
                s["event_to_commit_during_big_ms"]["p50"],
                s["event_to_commit_during_big_ms"]["p99"],
                s["debt_slope_per_min"],
            ]
            for s in steady
        ],
    )
    during = next(s for s in steady if s["concurrency"] == 4)["event_to_commit_during_big_ms"]["p99"]
    cpu4 = local[4]["cpu_seconds_per_merge"]
    work4 = local[4].get("spark_work") or {}
    print()
    verdicts = judge(
        TARGETS,
        {
            "drain_c4": at4,
            "speedup_4_vs_1": speedup,
            "p99_beside_big_ms": during,
            "set_transactions": local[4].get("set_transactions"),
            "cpu_seconds_per_merge_c4": cpu4,
            "spark_jobs_per_merge_c4": work4.get("jobs_per_merge"),
            "state_rebuilds_per_merge_c4": work4.get("state_rebuilds_per_merge"),
            "certificate_cpu_ratio_c4": certificate_cost,
        },
    )
    print(f"drain at concurrency 4: {at4:.1f} merges/s")
    print(f"CPU-seconds per merge at concurrency 4: {cpu4:.2f}")
    print(f"drain speed-up at concurrency 4 vs 1: {speedup:.1f}×")
    two = next(d for d in drains if d["master"].startswith("2 jobs"))
    print(
        f"two jobs (2 x local[1], c=2 each) vs one (local[2], c=4): {two['merges_per_s']:.2f} vs "
        f"{at4:.2f} merges/s = {two['merges_per_s'] / at4:.2f}x (the cost of sharding on one machine)"
    )
    path = save_results(
        "capacity",
        quick,
        {
            "tables": tables,
            "segments": segments,
            "verdicts": verdicts,
            "drains": drains,
            "steady": steady,
            "speedup_4_vs_1": speedup,
            "two_jobs_vs_one": two["merges_per_s"] / at4,
            "certificate_cpu_ratio_c4": certificate_cost,
            "machine": machine_info(),
        },
    )
    plot(path.with_suffix(".png"), drains, steady)


def plot(path: Path, drains: list[dict[str, Any]], steady: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{d['master']}\nc={d['concurrency']}" for d in drains]
    left.bar(labels, [d["merges_per_s"] for d in drains], color="#4c72b0")
    left.axhline(TARGETS[0].bound, color="#c44e52", linestyle="--", label="target at c=4")
    left.set_ylabel("merges drained per second")
    left.set_title("Drain")
    left.legend()
    for s in steady:
        points = s["debt"]
        right.plot([p[0] for p in points], [p[1] for p in points], label=f"c={s['concurrency']}")
        if s["big_sent_s"] is not None:
            right.axvspan(s["big_sent_s"], s["big_committed_s"] or points[-1][0], alpha=0.1)
    right.set_xlabel("seconds")
    right.set_ylabel("unmerged loads (debt)")
    right.set_title("Steady load; shaded: the 1 GiB merge runs")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"saved {path}")


if __name__ == "__main__":
    main()

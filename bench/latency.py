"""Event-to-commit latency of the real streaming job, beside the micro-batch floor.

A real Kafka broker (a LocalKafkaBroker, unless KAFKA_BOOTSTRAP_SERVERS is set;
topics get a unique suffix either way), a SparkSession from `build_spark`
(local[2]) and the streaming query from `start_query` with a 0.5 s
processingTime trigger, in this process. The table uses the `minor` rule with
level_thresholds [2, 0]: every two loads make one merge; its checkpoint interval is held by the
job (`hold_checkpoint_interval`), whose maintainer checkpoints it every 10 commits.

Per merge, two segments are loaded as a loader does (`write_segment`: one Delta
commit each, with the segment in its metadata), then, after a random delay of
0..trigger (so events land at random phases of the trigger), their two
`SegmentCompleted` events are produced with `EventProducer` + the codec; t0 is
taken just before the second one (the event that completes the group) is
produced. (Until 2026-11-23 every segment was written in one append before the
run; then the job's check that a load's rows are in Delta found them beyond the
recent commits and asked Spark each batch, 0.35 s a batch no real load pays.) Measured per merge:

- commit visible: t0 -> the merge's commit file `_delta_log/<version>.json`
  appears with the plan's id in its userMetadata (a thread polls every 5 ms);
- result consumed: t0 -> a consumer thread receives the plan's MergeResult
  (its table_version is checked against the commit seen);
- the trigger's phase apart: Spark's progress report of the batch that read the completing
  event (found by the event's offset) says when that batch's trigger fired, so t0 -> trigger
  (0..trigger_ms, the same for any job) and trigger -> commit (the job's own path) are given
  apart, and the floor's trigger -> no-op invocation beside them.

Each pair goes out once the previous merge's MergeResult is consumed, as in a
stream that merges continuously: the job may still be closing the previous
batch, or running the (empty) attempt that the previous output's own completion
event triggers, and the figures include that wait. The micro-batch floor is then measured on the same topic with the
same trigger: a no-op foreachBatch function, produce -> batch invocation.
Peak RSS is that of the driver tree (Python + JVM, summed as PSS), excluding the broker.

With --console, the job serves its web console and a poller reads the warehouse and table pages
(and their live fragments, as a browser's htmx does) every 0.5 s during every other merge: the
merges with and without the console interleave in one run, and the p50 of each is printed.

Run: .venv/bin/python bench/latency.py [--quick] [--console]   (quick: 10 merges, 10 floor samples)
Saves bench/results/latency[_quick].json.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import DataFrame, SparkSession

from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.table_ops.writes import write_segment
from compactor.dev.kafka_broker import LocalKafkaBroker
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.plans import plan_id_for
from compactor.domain.segments import Segment, TimeRange
from compactor.job.query import start_query
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.observe.metrics.job_metrics import JobMetrics
from compactor.observe.metrics.spark_work import RETAIN, SparkWork
from compactor.observe.metrics.spark_work import describe as describe_work
from compactor.spark.session import build_spark
from compactor.stream.reporting import BATCH_PHASES
from harness.loads import bench_topics
from harness.probes import PeakRss
from harness.report import MIB, bench_parser, machine_info, percentiles, print_table, save_results
from harness.spark_rows import segment_rows, spark_quiet
from harness.targets import Target, judge

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

    from compactor.config.tables import ProjectConfig
    from compactor.stream.handler import BatchHandler

TABLE = "latency"
RULE = "minor"
# the job alone checkpoints the table (its maintainer raises delta.checkpointInterval): else one
# merge in ten rebuilds the table's state inside its commit, for Delta's commit statistics
TABLE_SETTINGS: dict[str, Any] = {
    "rules": [{"rule": RULE, "level_thresholds": [2, 0]}],
    "hold_checkpoint_interval": True,
}
START = datetime(2024, 1, 1, tzinfo=UTC)
# every batch's progress kept by Spark (100 by default), read after the run: when each batch began
PROGRESS_KEPT = {"spark.sql.streaming.numRecentProgressUpdates": "100000"}
DEFAULT_TRIGGER_MS = 500
POLL_SECONDS = 0.005
WAIT_SECONDS = 120.0
WARMUP = 2  # merges and no-op batches run first and reported apart (JIT, first-use costs)
TARGETS = (
    Target("p50_vs_floor", "event -> commit p50 / the micro-batch floor's p50", 1.5, unit="x"),
    Target("p95_vs_p50", "event -> commit p95 / its p50", 1.25, unit="x"),
    Target("p99_ms", "event -> commit p99", 1000, unit=" ms"),
    # the job's maintainer writes checkpoints, off the merge's commit path
    Target("state_rebuilds_in_merges", "Delta state rebuilds inside merges", 0),
)


@dataclass
class Watch:
    """What the watcher threads saw, keyed by plan id (monotonic seconds)."""

    visible: dict[str, tuple[float, int]] = field(default_factory=dict)  # plan id -> (time, version)
    consumed: dict[str, tuple[float, int | None, str, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


def watch_log(log_dir: Path, first_version: int, watch: Watch) -> None:
    """Poll `_delta_log` for the next commit file; record the plan id of each merge commit."""
    version = first_version
    while not watch.stop.is_set():
        path = log_dir / f"{version:020d}.json"
        if not path.exists():
            time.sleep(POLL_SECONDS)
            continue
        seen = time.monotonic()
        try:
            actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            time.sleep(POLL_SECONDS)  # not expected (Delta renames a complete file into place)
            continue
        for action in actions:
            meta = (action.get("commitInfo") or {}).get("userMetadata")
            if meta:
                plan_id = json.loads(meta).get("plan_id")
                if plan_id:
                    with watch.lock:
                        watch.visible.setdefault(plan_id, (seen, version))
        version += 1


def watch_results(kafka: KafkaSettings, watch: Watch) -> None:
    """Consume MergeResults from the start of the topic; record when each plan's arrives."""
    codec = default_codec()
    consumer = Consumer(
        kafka.librdkafka(**{"group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False})
    )
    try:
        consumer.assign([TopicPartition(kafka.results_topic, 0, 0)])
        while not watch.stop.is_set():
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error():
                watch.errors.append(str(msg.error()))
                continue
            received = time.monotonic()
            result = codec.decode_merge_result(msg.value() or b"")
            with watch.lock:
                watch.consumed.setdefault(
                    result["plan_id"],
                    (received, result["table_version"], str(result["status"]), result["duration_ms"]),
                )
    finally:
        consumer.close()


def load(spark: SparkSession, warehouse: Path, i: int, rows: int) -> Segment:
    """Segment i (hour i after START) loaded as a loader does: one commit, the segment in its
    metadata; returned as committed (records and bytes from the commit)."""
    start = START + timedelta(hours=i)
    segment = Segment(f"lat-{i:05d}", TABLE, TimeRange(start, start + timedelta(hours=1)), now_utc())
    return write_segment(spark, warehouse, segment, segment_rows(spark, 1, rows, 1, start, prefix="lat"))


def merge_seen(watch: Watch, plan_id: str) -> bool:
    return plan_id in watch.consumed and plan_id in watch.visible


def more_than(items: list[float], count: int) -> bool:
    return len(items) > count


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_SECONDS)


@dataclass(frozen=True)
class BatchReport:
    """One micro-batch as Spark reported it: when its trigger fired (epoch seconds), the Kafka
    offsets it read, [start, end) per (topic, partition), and its phases (ms)."""

    started: float
    offsets: dict[tuple[str, int], tuple[int, int]]
    durations: dict[str, int]


def batch_reports(query: StreamingQuery) -> list[BatchReport]:
    """Every batch of the query, from the progress Spark keeps (`PROGRESS_KEPT` of them)."""
    reports = []
    for progress in query.recentProgress:
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        for source in progress["sources"]:
            start = json.loads(source["startOffset"] or "null") or {}
            for topic, ends in (json.loads(source["endOffset"] or "null") or {}).items():
                for partition, end in ends.items():
                    first = (start.get(topic) or {}).get(partition, 0)
                    if end > first:
                        offsets[(topic, int(partition))] = (int(first), int(end))
        started = datetime.fromisoformat(progress["timestamp"]).timestamp()
        reports.append(BatchReport(started, offsets, dict(progress["durationMs"])))
    return reports


def batch_holding(reports: list[BatchReport], topic: str, partition: int, offset: int) -> BatchReport | None:
    """The batch that read the message at (partition, offset) of the topic."""
    for report in reports:
        span = report.offsets.get((topic, partition))
        if span is not None and span[0] <= offset < span[1]:
            return report
    return None


def trigger_waits(
    reports: list[BatchReport], topic: str, sent: list[tuple[float, tuple[int, int]]]
) -> list[tuple[float, BatchReport] | None]:
    """For each message sent (wall clock at its send, where it landed): how long it waited (ms)
    for the trigger of the batch that read it, and that batch (None: no report found)."""
    found: list[tuple[float, BatchReport] | None] = []
    for at, (partition, offset) in sent:
        report = batch_holding(reports, topic, partition, offset)
        found.append(None if report is None else ((report.started - at) * 1000, report))
    return found


class ConsolePoller:
    """Reads the console's pages every `every` seconds while `active` is set."""

    PAGES = ("/", "/fragments/tables", f"/tables/{TABLE}", f"/fragments/tables/{TABLE}")

    def __init__(self, base: str, every: float = 0.5) -> None:
        self.base, self.every = base, every
        self.active = threading.Event()
        self.stop = threading.Event()
        self.requests = 0
        self.seconds: list[float] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import urllib.request

        while not self.stop.is_set():
            if not self.active.wait(0.1):
                continue
            for page in self.PAGES:
                began = time.perf_counter()
                with (
                    contextlib.suppress(OSError),
                    urllib.request.urlopen(self.base + page, timeout=30) as answer,
                ):
                    answer.read()
                self.seconds.append(time.perf_counter() - began)
                self.requests += 1
            self.stop.wait(self.every)


def measure_merges(
    spark: SparkSession,
    warehouse: Path,
    kafka: KafkaSettings,
    checkpoint: Path,
    pairs: int,
    rows: int,
    budget: float | None,
    trigger_ms: int,
    console: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Time one merge per pair of loads; stop early once `budget` seconds have passed."""
    first_pair = (load(spark, warehouse, 0, rows), load(spark, warehouse, 1, rows))  # creates the table
    codec = default_codec()
    config = load_config({"defaults": TABLE_SETTINGS})
    job_producer = EventProducer(kafka)
    metrics = JobMetrics()
    handler = build_handler(spark, config, warehouse, kafka, job_producer, metrics=metrics)
    producer = EventProducer(kafka)
    watch = Watch()
    log_dir = Path(table_uri(warehouse, TABLE)) / "_delta_log"
    first = max(int(p.stem) for p in log_dir.glob("*.json")) + 1
    threads = [
        threading.Thread(target=watch_log, args=(log_dir, first, watch), daemon=True),
        threading.Thread(target=watch_results, args=(kafka, watch), daemon=True),
    ]
    for t in threads:
        t.start()
    poller = _console_poller(config, kafka, handler) if console else None
    query = start_query(spark, handler, kafka, checkpoint, trigger_interval=f"{trigger_ms} milliseconds")
    rng = random.Random(42)
    samples: list[dict[str, Any]] = []
    sample_landed: list[tuple[float, tuple[int, int]]] = []  # wall clock at t0, where the event landed
    reports: list[BatchReport] = []

    def produce(segment: Segment) -> tuple[int, int]:
        data = codec.encode_segment_completed(SegmentCompleted(segment, produced_at=now_utc()))
        (landed,) = producer.send_all([(kafka.segments_topic, TABLE, data, None)])
        return landed

    try:
        deadline = time.monotonic() + budget if budget else None
        for i in range(pairs):
            if deadline is not None and i > WARMUP and time.monotonic() > deadline:
                break
            a, b = (
                first_pair
                if i == 0
                else (load(spark, warehouse, 2 * i, rows), load(spark, warehouse, 2 * i + 1, rows))
            )
            plan_id = plan_id_for(TABLE, RULE, [a.id, b.id])
            polled = poller is not None and i % 2 == 1  # every other merge with the console polled
            if poller is not None:
                (poller.active.set if polled else poller.active.clear)()
            time.sleep(rng.uniform(0, trigger_ms / 1000))
            produce(a)
            t0, t0_wall = time.monotonic(), time.time()
            landed = produce(b)
            acked = time.monotonic()
            wait_for(partial(merge_seen, watch, plan_id), f"merge {i}")
            visible_at, version = watch.visible[plan_id]
            consumed_at, result_version, status, duration_ms = watch.consumed[plan_id]
            # The next pair goes out without waiting for the job to finish this batch and the
            # (empty) attempt its output's event triggers: a continuously merging stream.
            samples.append(
                {
                    "merge": i - WARMUP,
                    "plan_id": plan_id,
                    "produce_ack_ms": (acked - t0) * 1000,
                    "executor_ms": duration_ms,
                    "commit_visible_ms": (visible_at - t0) * 1000,
                    "result_consumed_ms": (consumed_at - t0) * 1000,
                    "version": version,
                    "result_version_matches": result_version == version,
                    "status": status,
                    "console_polled": polled,
                }
            )
            sample_landed.append((t0_wall, landed))
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
        reports = batch_reports(query)
        # the trigger's phase apart from the job's own path: when the batch holding the event
        # that completed the pair began, from Spark's own report of it
        waits = trigger_waits(reports, kafka.segments_topic, sample_landed)
        for sample, found in zip(samples, waits, strict=True):
            if found is not None:
                wait, report = found
                sample.update(
                    trigger_wait_ms=wait,
                    batch_to_commit_ms=sample["commit_visible_ms"] - wait,
                    batch_ms=report.durations.get("triggerExecution"),
                )
    finally:
        query.stop()
        watch.stop.set()
        for t in threads:
            t.join(timeout=10)
        producer.close()
        job_producer.close()
        if poller is not None:
            poller.stop.set()
            poller.thread.join(timeout=30)
    stats = handler.stats
    registry = metrics.registry
    phases = {
        phase: {
            "calls": int(
                registry.get_sample_value("compactor_batch_phase_seconds_count", {"phase": phase}) or 0
            ),
            "seconds": registry.get_sample_value("compactor_batch_phase_seconds_sum", {"phase": phase})
            or 0.0,
        }
        for phase in BATCH_PHASES
    }
    return samples, {
        "batch_seconds_total": registry.get_sample_value("compactor_batch_duration_seconds_sum") or 0.0,
        "phases": phases,
        "events": stats.events,
        "batches": sum(1 for r in reports if r.offsets),
        "merges": stats.merges,
        "failed_merges": stats.failed_merges,
        "attempt_errors": stats.attempt_errors,
        "dead_letters": stats.dead_letters,
        "consumer_errors": watch.errors[:5],
    }


def measure_floor(
    spark: SparkSession, kafka: KafkaSettings, checkpoint: Path, count: int, trigger_ms: int
) -> list[tuple[float, float | None]]:
    """produce -> invocation of a no-op foreachBatch on the same topic, same trigger (ms); and
    the part of it after the batch's trigger fired (None: its report was not found)."""
    invoked: list[float] = []

    def noop(batch: DataFrame, batch_id: int) -> None:
        invoked.append(time.monotonic())

    reader = spark.readStream.format("kafka")
    for key, value in kafka.spark_options().items():
        reader = reader.option(key, value)
    stream = reader.option("subscribe", kafka.segments_topic).option("startingOffsets", "latest").load()
    query = (
        stream.writeStream.foreachBatch(noop)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .queryName("bench-noop")
        .start()
    )
    producer = EventProducer(kafka)
    rng = random.Random(7)
    segment = Segment("floor-probe", "floor_probe", TimeRange(START, START + timedelta(hours=1)), START)
    data = default_codec().encode_segment_completed(SegmentCompleted(segment, produced_at=now_utc()))
    out: list[tuple[float, float | None]] = []
    landed: list[tuple[float, tuple[int, int]]] = []
    try:
        wait_for(lambda: query.lastProgress is not None, "the no-op query to start")
        time.sleep(1.0)
        for i in range(count + WARMUP):
            time.sleep(rng.uniform(0, trigger_ms / 1000))
            seen = len(invoked)
            t0, t0_wall = time.monotonic(), time.time()
            (where,) = producer.send_all([(kafka.segments_topic, "floor_probe", data, None)])
            wait_for(partial(more_than, invoked, seen), f"no-op batch {i}")
            out.append(((invoked[seen] - t0) * 1000, None))
            landed.append((t0_wall, where))
            wait_for(lambda: not query.status["isTriggerActive"], "the no-op batch to end")
        waits = trigger_waits(batch_reports(query), kafka.segments_topic, landed)
        out = [
            (ms, None if found is None else ms - found[0]) for (ms, _), found in zip(out, waits, strict=True)
        ]
    finally:
        query.stop()
        producer.close()
    return out


def p50_difference_interval(a: list[float], b: list[float], rounds: int = 5000) -> tuple[float, float]:
    """The 95% bootstrap interval of median(a) - median(b) (resampled with a fixed seed): when it
    holds 0, the two p50s differ by no more than the run's noise."""
    if not a or not b:
        return (math.nan, math.nan)
    rng = random.Random(0)
    diffs = sorted(
        statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
        for _ in range(rounds)
    )
    return diffs[int(rounds * 0.025)], diffs[int(rounds * 0.975) - 1]


def _console_poller(config: ProjectConfig, kafka: KafkaSettings, handler: BatchHandler) -> ConsolePoller:
    """The job's console on a free port, and a poller over it (started, not yet active)."""
    from prometheus_client import CollectorRegistry

    from compactor.observe.console.serve import job_console
    from compactor.observe.metrics.server import ProbeServer

    console = job_console(config, kafka, lambda: [handler], lambda: None, None)
    server = ProbeServer(CollectorRegistry(), {}, "127.0.0.1", 0, console=console.app).start()
    poller = ConsolePoller(f"http://127.0.0.1:{server.port}")
    poller.thread.start()
    return poller


def main() -> None:
    parser = bench_parser(__doc__, "10 merges, 10 floor samples")
    parser.add_argument("--merges", type=int, default=None, help="merges to time (default 200; quick 10)")
    parser.add_argument(
        "--floor", type=int, default=None, help="no-op batches to time (default 60; quick 10)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=780.0,
        help="stop timing merges after this many seconds, even short of --merges (default 780; 0: none)",
    )
    parser.add_argument(
        "--trigger-ms",
        type=int,
        default=DEFAULT_TRIGGER_MS,
        help=f"processingTime trigger of the job and the no-op query (default {DEFAULT_TRIGGER_MS}; 0: back to back)",
    )
    parser.add_argument("--rows", type=int, default=1_000, help="rows per segment (default 1000)")
    parser.add_argument("--verbose", action="store_true", help="log the job's INFO lines (timestamps)")
    parser.add_argument(
        "--console",
        action="store_true",
        help="serve the job's console and poll its pages during every other merge (p50 with and without)",
    )
    args = parser.parse_args()
    merges = args.merges or (10 if args.quick else 200)
    floor_count = args.floor or (10 if args.quick else 60)
    budget = None if args.quick or args.budget <= 0 else args.budget
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )

    began = time.perf_counter()
    machine = machine_info()
    scratch = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    broker: LocalKafkaBroker | None = None
    spark: SparkSession | None = None
    try:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = LocalKafkaBroker(scratch / "kafka")
            bootstrap = broker.start()
        kafka = bench_topics(bootstrap, f"bench-latency-{uuid.uuid4().hex[:8]}")
        with PeakRss(exclude=[broker.pid] if broker and broker.pid else []) as rss:
            spark = build_spark("bench-latency", master="local[2]", extra_conf=RETAIN | PROGRESS_KEPT)
            spark_quiet(spark)
            warehouse = scratch / "warehouse"
            t = time.perf_counter()
            work = SparkWork(spark)
            all_samples, job = measure_merges(
                spark,
                warehouse,
                kafka,
                scratch / "checkpoint",
                merges + WARMUP,
                args.rows,
                budget,
                args.trigger_ms,
                args.console,
            )
            merge_seconds = time.perf_counter() - t
            spark_work = work.summary(len(all_samples))
            t = time.perf_counter()
            all_floor = measure_floor(spark, kafka, scratch / "checkpoint-noop", floor_count, args.trigger_ms)
            floor_seconds = time.perf_counter() - t
    finally:
        if spark is not None:
            with contextlib.suppress(Exception):
                for q in spark.streams.active:
                    q.stop()
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    samples, floor_pairs = all_samples[WARMUP:], all_floor[WARMUP:]
    floor = [ms for ms, _ in floor_pairs]

    def of_samples(key: str) -> dict[str, Any]:
        return percentiles([s[key] for s in samples if s.get(key) is not None])

    visible, consumed, acked = (
        of_samples("commit_visible_ms"),
        of_samples("result_consumed_ms"),
        of_samples("produce_ack_ms"),
    )
    waited, path, batch = (
        of_samples("trigger_wait_ms"),
        of_samples("batch_to_commit_ms"),
        of_samples("batch_ms"),
    )
    executor = of_samples("executor_ms")
    floor_stats = percentiles(floor)
    floor_path = percentiles([after for _, after in floor_pairs if after is not None])
    rows: list[tuple[str, dict[str, Any]]] = [
        ("event -> merge commit visible in Delta", visible),
        ("event -> MergeResult consumed", consumed),
        ("micro-batch floor: produce -> no-op batch", floor_stats),
        ("  parts: produce -> broker ack", acked),
        ("  parts: event -> its batch's trigger fired", waited),
        ("  parts: its batch's trigger -> commit visible", path),
        ("  parts: execute_merge (MergeResult.duration_ms)", executor),
        ("  the batch holding the event (triggerExecution)", batch),
        ("  floor parts: the batch's trigger -> no-op invoked", floor_path),
    ]
    print()
    print_table(
        ["latency (ms)", "n", "p50", "p95", "p99", "max", "p50 / floor p50"],
        [
            [
                name,
                s["n"],
                s["p50"],
                s["p95"],
                s["p99"],
                s["max"],
                f"{s['p50'] / floor_stats['p50']:.1f}x" if s["p50"] and floor_stats["p50"] else "-",
            ]
            for name, s in rows
        ],
    )
    in_batches = job["batch_seconds_total"] or 1.0
    print("\nwhere the job's batches spent their time (all batches of the run, warm-up included):")
    print_table(
        ["phase", "calls", "total s", "mean ms per call", "share of batch time"],
        [
            [
                name,
                p["calls"],
                p["seconds"],
                1000 * p["seconds"] / max(1, p["calls"]),
                f"{p['seconds'] / in_batches:.0%}",
            ]
            for name, p in job["phases"].items()
        ],
    )
    print(f"\nSpark's work over the run: {describe_work(spark_work)}")
    # The trigger's phase (an event waits 0..trigger for its batch) is in both the merges and the
    # floor, and it alone spreads the floor's p95 to about twice its p50: apart from it, what the
    # job's own path costs and how much it varies.
    phase_free = {
        "p95_vs_p50": path["p95"] / path["p50"] if path["p50"] and path["p95"] else None,
        "p50_vs_floor": path["p50"] / floor_path["p50"] if path["p50"] and floor_path["p50"] else None,
    }
    if phase_free["p95_vs_p50"] and phase_free["p50_vs_floor"]:
        print(
            f"from the batch's trigger on (the trigger's phase left out): commit p95 / p50 "
            f"{phase_free['p95_vs_p50']:.2f}x, p50 / the floor's {phase_free['p50_vs_floor']:.2f}x"
        )
    p50, floor_p50 = visible["p50"], floor_stats["p50"]
    verdicts = judge(
        TARGETS,
        {
            "p50_vs_floor": p50 / floor_p50 if p50 and floor_p50 else None,
            "p95_vs_p50": visible["p95"] / p50 if p50 and visible["p95"] else None,
            "p99_ms": visible["p99"],
            "state_rebuilds_in_merges": spark_work.get("state_rebuilds_in_merges") if spark_work else None,
        },
    )
    console_split = None
    if args.console:
        polled = percentiles([s["commit_visible_ms"] for s in samples if s["console_polled"]])
        quiet = percentiles([s["commit_visible_ms"] for s in samples if not s["console_polled"]])
        low, high = p50_difference_interval(
            [s["commit_visible_ms"] for s in samples if s["console_polled"]],
            [s["commit_visible_ms"] for s in samples if not s["console_polled"]],
        )
        console_split = {"polled": polled, "not_polled": quiet, "p50_difference_95_ms": [low, high]}
        if polled["p50"] and quiet["p50"]:
            noise = "within the run's noise" if low <= 0 <= high else "beyond the run's noise"
            print(
                f"console polled every 0.5 s: event -> commit p50 {polled['p50']:.0f} ms (n={polled['n']}) against "
                f"{quiet['p50']:.0f} ms without (n={quiet['n']}): {polled['p50'] / quiet['p50']:.2f}x; the "
                f"difference's 95% bootstrap interval is [{low:.0f}, {high:.0f}] ms: {noise}"
            )
    mismatched = sum(not s["result_version_matches"] for s in samples)
    failed = sum(s["status"] != "SUCCEEDED" for s in samples)
    total = time.perf_counter() - began
    cycle = merge_seconds / max(1, len(all_samples))
    short = len(samples) < merges
    print(
        f"\ntrigger {args.trigger_ms} ms; {len(samples)} merges in {merge_seconds:.0f}s, {len(floor)} no-op batches in "
        f"{floor_seconds:.0f}s; job stats {job}\n"
        f"MergeResult.table_version == commit seen: {len(samples) - mismatched}/{len(samples)}; "
        f"failed merges: {failed}; peak driver RSS {rss.peak_mib:,.0f} MiB (broker excluded); total {total:.0f}s"
    )
    if short:
        print(
            f"NOTE: stopped by --budget {budget:.0f}s after {len(samples)} of {merges} merges: one merge cycle "
            f"(pair produced, merged, its output's follow-up attempt done) takes {cycle:.1f}s here.\n"
            "      Percentiles are over fewer samples than asked (p99 is close to the max); "
            "--budget 0 runs all."
        )
    save_results(
        "latency_console" if args.console else "latency",  # the console run keeps the plain run's figures
        args.quick,
        {
            "machine": machine,
            "params": {
                "merges": merges,
                "floor_samples": floor_count,
                "rows_per_segment": args.rows,
                "trigger_ms": args.trigger_ms,
                "table_settings": TABLE_SETTINGS,
                "broker": "external" if broker is None else "LocalKafkaBroker",
                "console": args.console,
            },
            "verdicts": verdicts,
            "commit_visible_ms": visible,
            "commit_visible_ms_by_console": console_split,
            "result_consumed_ms": consumed,
            "floor_ms": floor_stats,
            "produce_ack_ms": acked,
            "trigger_wait_ms": waited,
            "batch_to_commit_ms": path,
            "floor_trigger_to_invoked_ms": floor_path,
            "phase_free": phase_free,
            "executor_ms": executor,
            "spark_work": spark_work,
            "peak_rss_mib": rss.peak / MIB,
            "job": job,
            "version_mismatches": mismatched,
            "failed": failed,
            "merge_phase_seconds": merge_seconds,
            "seconds_per_merge_cycle": cycle,
            "stopped_by_budget": short,
            "budget_seconds": budget,
            "batch_ms": batch,  # Spark's triggerExecution of the batch holding the pair's event
            "floor_phase_seconds": floor_seconds,
            "total_seconds": total,
            "warmup": {"merges": all_samples[:WARMUP], "floor_ms": all_floor[:WARMUP]},
            "samples": samples,
            "floor_samples_ms": floor,
            "floor_samples_trigger_to_invoked_ms": [after for _, after in floor_pairs],
        },
    )


if __name__ == "__main__":
    main()

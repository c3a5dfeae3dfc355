"""Shared helpers for the benchmarks: machine info, peak RSS sampling, results, tables.

Not a benchmark itself. Scripts run as `python bench/<name>.py`, which puts this
directory on sys.path, so they import it as `_common`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from compactor.kafka.settings import KafkaSettings

RESULTS = Path(__file__).parent / "results"
MIB = 1024 * 1024


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (out.stderr or out.stdout).splitlines()
    return first[0].strip() if first else None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info() -> dict[str, Any]:
    """What ran the benchmark: CPUs, memory, OS and the versions that matter."""
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "os": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "pyspark": _version("pyspark"),
        "delta_spark": _version("delta-spark"),
        "confluent_kafka": _version("confluent-kafka"),
        "java": _java_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "spark_submit_opts": os.environ.get("SPARK_SUBMIT_OPTS"),  # a smoke run's JIT settings
    }


def save_results(name: str, quick: bool, payload: dict[str, Any]) -> Path:
    """Write bench/results/<name>[_quick].json with the machine and the time of the run."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / (f"{name}_quick.json" if quick else f"{name}.json")
    body = {"benchmark": name, "quick": quick, "when": datetime.now(UTC).isoformat(), **payload}
    body.setdefault("machine", machine_info())
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=2, default=str) + "\n")
    tmp.replace(out)
    print(f"saved {out}")
    return out


def percentiles(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, p50, p95, p99, min, max and mean (nearest-rank percentiles)."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "min": None, "max": None, "mean": None}
    ordered = sorted(values)

    def rank(p: float) -> float:
        k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
        return ordered[k]

    return {
        "n": len(ordered),
        "p50": rank(50),
        "p95": rank(95),
        "p99": rank(99),
        "min": ordered[0],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]], left: Sequence[int] = (0,)) -> None:
    """A plain aligned text table (columns in `left` left-aligned, others right); floats get 3 decimals."""

    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]
    print(
        "  ".join(
            h.ljust(w) if i in left else h.rjust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    )
    for r in text:
        print(
            "  ".join(
                v.ljust(w) if i in left else v.rjust(w)
                for i, (v, w) in enumerate(zip(r, widths, strict=True))
            )
        )


def _resident(proc: psutil.Process) -> int:
    """Resident memory of one process, as PSS where the kernel reports it, else RSS.

    Summing plain RSS over a tree double counts: when the JVM forks a helper
    (Hadoop's local file system runs `chmod` that way) the child shares the JVM's
    pages until it execs, and its RSS shows them all again (a 1.6 GB JVM briefly
    looked like 3.2 GB). PSS splits shared pages between the processes sharing
    them, so the sum over the tree is the tree's real resident memory.
    """
    try:
        return int(proc.memory_full_info().pss)
    except (AttributeError, psutil.AccessDenied):
        return int(proc.memory_info().rss)


class PeakRss:
    """Sample the resident memory of a process tree (default: this process and its children).

    The driver is the Python process plus the JVM it starts (and any Python
    workers the JVM forks): `psutil` walks the tree every `interval` seconds and
    sums each process's PSS (see `_resident`: RSS without double-counting shared
    pages). Pids in `exclude` (and their descendants), such as a Kafka broker this
    process started, are left out. Use as a context manager; `peak` is in bytes.
    """

    def __init__(self, root: int | None = None, interval: float = 0.2, exclude: Iterable[int] = ()) -> None:
        self.root = psutil.Process(root or os.getpid())
        self.interval = interval
        self.exclude = set(exclude)
        self.peak = 0
        self.at_peak: dict[str, int] = {}  # process name -> resident bytes when the peak was sampled
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def tree_rss(self) -> int:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return 0
        skipped = set(self.exclude)
        for pid in self.exclude:
            try:
                skipped.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue
        total = 0
        parts: dict[str, int] = {}
        for proc in procs:
            if proc.pid in skipped:
                continue
            try:
                rss = _resident(proc)
                name = proc.name()
            except psutil.Error:
                continue
            total += rss
            parts[name] = parts.get(name, 0) + rss
        if total > self.peak:
            self.at_peak = parts
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.tree_rss())
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.peak = max(self.peak, self.tree_rss())
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.tree_rss())

    @property
    def peak_mib(self) -> float:
        return self.peak / MIB

    def breakdown_mib(self) -> dict[str, float]:
        """Resident memory per process name (python, java, ...) at the sampled peak, in MiB."""
        return {name: round(rss / MIB, 1) for name, rss in sorted(self.at_peak.items())}


PAYLOAD_MAX = 128  # hex characters of one SHA-512


def segment_rows(
    spark: SparkSession,
    segments: int,
    rows: int,
    files_per_segment: int,
    start: datetime,
    prefix: str = "seg",
    payload: int = 0,
) -> DataFrame:
    """`segments` hourly segments of `rows` rows each, segment i covering hour i after `start`.

    `spark.range` splits ids evenly over its partitions, so with `rows` divisible by
    `files_per_segment` no task mixes two segments and every write task leaves one
    file of one segment (`files_per_segment` small files per segment, as a parallel
    load leaves them). Values are hashed so the files do not compress to nothing.
    Columns: segment_id (`<prefix>-%05d`), event_time, customer_id (0..99999),
    amount (decimal(10,2)), order_ref (bigint), and with `payload` > 0 a `note` of
    that many hex characters (at most 128), which neither compresses nor
    dictionary-encodes: a wide row reaches a gigabyte with a fifth of the rows.
    """
    from pyspark.sql import functions as F

    if not 0 <= payload <= PAYLOAD_MAX:
        raise ValueError(f"payload {payload}: must be 0 to {PAYLOAD_MAX} characters")

    ids = spark.range(0, segments * rows, 1, numPartitions=segments * files_per_segment)
    seg = F.floor(F.col("id") / rows)
    offset = F.col("id") - seg * rows
    first = int(start.timestamp())
    note = [F.substring(F.sha2(F.col("id").cast("string"), 512), 1, payload).alias("note")] if payload else []
    return ids.select(
        F.format_string(f"{prefix}-%05d", seg).alias("segment_id"),
        F.timestamp_seconds(F.lit(first) + seg * 3600 + F.floor(offset * 3600 / rows)).alias("event_time"),
        F.pmod(F.xxhash64("id"), F.lit(100_000)).cast("int").alias("customer_id"),
        (F.pmod(F.xxhash64("id", F.lit(1)), F.lit(10_000_000)) / 100).cast("decimal(10,2)").alias("amount"),
        F.xxhash64("id", F.lit(2)).alias("order_ref"),
        *note,
    )


def spark_quiet(spark: SparkSession) -> None:
    """Errors only from the JVM side."""
    spark.sparkContext.setLogLevel("ERROR")


class Stopwatch:
    """`with Stopwatch() as w: ...`, then `w.seconds`."""

    seconds: float = 0.0

    def __enter__(self) -> Stopwatch:
        self._began = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.seconds = time.perf_counter() - self._began


def run_args(
    config: Path | str, warehouse: Path | str, checkpoint: Path | str, kafka: KafkaSettings
) -> list[str]:
    """`compactor run`'s options for a job on `warehouse` with its own topics (`KafkaSettings`)."""
    return [
        "--config", str(config), "--warehouse", str(warehouse), "--checkpoint", str(checkpoint),
        "--bootstrap-servers", kafka.bootstrap_servers, "--segments-topic", kafka.segments_topic,
        "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
    ]  # fmt: skip


@contextlib.contextmanager
def kafka_bootstrap(work: Path) -> Iterator[str]:
    """KAFKA_BOOTSTRAP_SERVERS if set; else a LocalKafkaBroker of our own in `work`, stopped after."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    from compactor.dev.kafka_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(work / "kafka")
    try:
        yield broker.start()
    finally:
        broker.stop()


def bench_parser(doc: str | None, quick: str) -> argparse.ArgumentParser:
    """The command line every benchmark shares: its docstring as help, and `--quick` (`quick` says what it runs)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{quick} (CI smoke run)")
    return parser

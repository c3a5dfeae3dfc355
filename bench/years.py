"""Months of operation compressed into one run: the real job (`compactor run`, its own process) on
real Kafka, Spark, Delta and an S3 API server (gofakes3) behind Toxiproxy, with the faults a year brings,
each more than once in the full run:

- the job SIGKILLed and restarted on its checkpoint;
- the broker paused (SIGSTOP) for longer than the lease's session, then resumed;
- the object store out of reach (the proxy cut; the loaders wait too) for longer than a whole
  quarantine streak (`cool_down` shortened to 1 s for the run, as an operator may set it);
- merges that hang: one asleep on the driver before its commit, one in a Spark task
  (`COMPACTOR_HANG`, compactor/stream/faults.py), each cancelled at its time bound;
- a table whose merges always fail: its config sorts by a column it does not have;
- another writer deleting rows (a delta-rs DELETE) while the job merges the table.

Loads come through `ArrowLoader` (delta-rs, straight to the S3 server: only the job is behind the
proxy), paced so that merges keep up. A `ResultsFollower` takes every result and is restarted with
the job. Every `sample_every` merges the job's driver is sampled: PSS of its Python process and of
its JVM, the JVM heap after a full GC (`jcmd GC.run`, then `GC.heap_info`), live threads, the files
under `_compactor/` and each Delta log's commits since its last checkpoint. At the end, the job
drained:

- every table's rows against what was loaded (less what the other writer deleted): rows lost,
  rows doubled, and an order-independent fingerprint (count, sum of each row's pandas hash);
- every result given to the follower once per (plan, status); every SUCCEEDED plan committed once;
- healthy tables quarantined (0), the failing table quarantined with its reason;
- the slope per 1,000 merges of memory and threads, fitted after each start's warm-up (1,000
  merges in the full run: the JVM's JIT, metaspace and caches, and the driver's bounded caches,
  settle over about that many; a start shorter than that adds nothing to the fit).

Exits 1 when rows or results are wrong; the other targets are printed and saved, met or missed.
Saves bench/results/years.json (`years_quick.json` with --quick).
Run: .venv/bin/python bench/years.py [--quick] [--tables N] [--merges N] [--minutes M] [--no-faults] [--keep]
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from harness.job_process import START_BANNER, JobProcess, run_args, samples_of
from harness.probes import (
    heap_after_gc_mib,
    jvm_native_mib,
    jvm_thread_names,
    pss_mib,
    spark_conf_dir,
    threads,
)
from harness.report import bench_parser, machine_info, print_table, save_results
from harness.results import FollowedResults, merge_commits, raw_results, results_check
from harness.services import S3_SERVERS, ProxiedS3, kafka_broker
from harness.targets import Target, judge

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from compactor.client.arrow_loader import ArrowLoader
    from compactor.dev.kafka_broker import LocalKafkaBroker
    from compactor.kafka.settings import KafkaSettings

PYTHON_MEMORY_KINDS = ("malloc_in_use", "malloc_free", "arrow_pool")
BUCKET = "bench-years"
WAREHOUSE = "warehouse"
ROWS = 20  # rows a load
JAN = datetime(2024, 1, 1, tzinfo=UTC)
BROKEN = "broken"  # its config sorts by a column it lacks: every merge fails
HANG_DRIVER, HANG_TASK, DELETED = "t01", "t02", "t03"  # healthy tables with a part in a fault
COOL_DOWN_S = 1
QUARANTINE_AFTER = 3
MERGE_TIMEOUT_S = 30
CATCH_UP_S = 120.0  # for the results follower to take what the job sent before it stopped
# Delta checkpoints every 10th version the job commits, delta-rs every 100th one the loads commit
JOB_CHECKPOINT_INTERVAL, LOADER_CHECKPOINT_INTERVAL = 10, 100
TARGETS = (
    Target("healthy_quarantined", "healthy tables quarantined", 0),
    Target("job_exits_on_its_own", "times the job exited on its own", 0),
    Target("rss_slope_mib_per_1000_merges", "driver PSS growth per 1,000 merges", 2, unit=" MiB"),
    Target("heap_slope_mib_per_1000_merges", "JVM heap (after GC) growth per 1,000 merges", 2, unit=" MiB"),
    Target(
        "steady_last_vs_first",
        "merges a minute in the last 10 minutes / the first 10 (judged without faults)",
        0.9,
        at_most=False,
        unit="x",
    ),
    Target(
        "table_commits_since_checkpoint",
        "a table's log commits past a checkpoint",
        LOADER_CHECKPOINT_INTERVAL,
    ),
    Target(
        "catalog_commits_since_checkpoint",
        "the catalog's log commits past a checkpoint",
        JOB_CHECKPOINT_INTERVAL,
    ),
)


@dataclass(frozen=True)
class Shape:
    """What one run does: its tables, its merges, and how often each fault strikes."""

    tables: int  # healthy tables (the failing one comes on top)
    merges: int  # loads stop once this many merges succeeded and every fault struck
    minutes: float  # ... or this long after the first merge (the job's start-up not counted)
    sample_every: int  # merges between samples of the driver
    warmup: int  # merges after each start before its samples count toward a slope
    outages: int
    outage_s: float
    kills: int
    pauses: int
    deletes: int
    faults_from: float  # the faults strike between these shares of `merges`
    faults_to: float
    fault_gap_s: float  # the job merging at least this long between two faults
    hang_every: int  # a table's every n-th merge in a process hangs (0: its first only; -1: none)
    hang_after_restarts: bool  # hang again in each process, or only in the first
    loaders: int  # threads loading
    drain_s: float  # at most this long for the job to finish what was loaded
    stop_s: float  # SIGTERM, then SIGKILL after this long


QUICK = Shape(
    tables=5, merges=16, minutes=2.0, sample_every=3, warmup=0,
    outages=1, outage_s=10, kills=1, pauses=1, deletes=1, faults_from=0.1, faults_to=0.5, fault_gap_s=5,
    hang_every=0, hang_after_restarts=False, loaders=1, drain_s=60, stop_s=20,
)  # fmt: skip
FULL = Shape(
    tables=56, merges=5000, minutes=120, sample_every=100, warmup=1000,
    outages=3, outage_s=40, kills=4, pauses=3, deletes=6, faults_from=0.1, faults_to=0.6, fault_gap_s=60,
    hang_every=5, hang_after_restarts=True, loaders=2, drain_s=600, stop_s=120,
)  # fmt: skip


def config_yaml(proxy_port: int) -> str:
    """`minor [2, 2]`: two loads make a level-1 segment, two of those a final level-2 one (3 merges
    per 4 loads). S3A reaches the store through the proxy with few retries, so that a cut link
    fails a merge in seconds rather than after S3A's minutes of retrying."""
    s3a = {
        "endpoint": f"http://127.0.0.1:{proxy_port}",
        "path.style.access": "true",
        "connection.ssl.enabled": "false",
        "endpoint.region": "us-east-1",
        "retry.limit": "1",
        "retry.interval": "50ms",
        "attempts.maximum": "1",
        "retry.throttle.limit": "1",
    }
    spark = "".join(f'  spark.hadoop.fs.s3a.{k}: "{v}"\n' for k, v in s3a.items())
    return (
        "defaults:\n  rules:\n    - rule: minor\n      level_thresholds: [2, 2]\n"
        f"tables:\n  {BROKEN}:\n    sort:\n      by: [no_such_column]\n"
        f"operations:\n  cool_down: {COOL_DOWN_S}s\n  quarantine_after: {QUARANTINE_AFTER}\n"
        f"  merge_timeout_floor: {MERGE_TIMEOUT_S}s\n  merge_timeout: {MERGE_TIMEOUT_S}s\n"
        "  check_other_writers_every: 5s\n"
        f"spark:\n{spark}"
    )


@dataclass(frozen=True)
class Services:
    """The object store (the job behind a proxy, loaders straight), and the Kafka broker: this run's
    own unless KAFKA_BOOTSTRAP_SERVERS names one (then no broker is paused)."""

    store: ProxiedS3
    bootstrap: str
    broker: LocalKafkaBroker | None


# -- loads and results ---------------------------------------------------------------------------


def load_rows(table: str, n: int) -> pa.Table:
    """Load `n` of `table`: ROWS rows, each (load, k) once."""
    import pyarrow as pa

    ks = range(ROWS)
    return pa.table(
        {
            "load": pa.array([n] * ROWS, pa.int64()),
            "k": pa.array(ks, pa.int64()),
            "v": pa.array([(n * 1_000_003 + k * 7919 + len(table)) % 1_000_000_007 for k in ks], pa.int64()),
            "note": pa.array([f"{table}-{n}-{k}" for k in ks], pa.string()),
        }
    )


def expected_merges(loads: int) -> int:
    """Merges `minor [2, 2]` makes of `loads` loads: one per two loads, one per two of those."""
    return loads // 2 + loads // 4


class Loader:
    """Loads round-robin over the tables through `ArrowLoader`, on `threads` threads (each its own
    loader and share of the tables), as long as the merges keep up (they wait while more than
    `max_owed` merges are owed) and the store is up. A failed load is tried again under its segment
    id: the loader's transaction id makes a retry announce the first commit, never write twice."""

    def __init__(
        self,
        services: Services,
        kafka: KafkaSettings,
        tables: list[str],
        results: FollowedResults,
        max_owed: int,
        threads: int,
    ) -> None:
        from compactor.client.arrow_loader import ArrowLoader

        def loader() -> ArrowLoader:
            return ArrowLoader(
                f"s3a://{BUCKET}/{WAREHOUSE}",
                kafka.bootstrap_servers,
                storage_options=services.store.storage_options(),
                segments_topic=kafka.segments_topic,
                results_topic=kafka.results_topic,
            )

        self.tables, self.results, self.max_owed = tables, results, max_owed
        self.loads: dict[str, int] = dict.fromkeys(tables, 0)
        self.retries = 0
        self.waited_s = 0.0  # time the threads waited for merges to catch up
        self.timed: list[tuple[float, float]] = []  # (when it ended, seconds it took) per load
        self.lock = threading.Lock()
        self.store_down = threading.Event()  # the object store is out of everyone's reach
        self.stopping = threading.Event()
        self._loaders = [loader() for _ in range(threads)]
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"years-loader-{i}", daemon=True)
            for i in range(threads)
        ]
        self._closed = False

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def owed(self) -> int:
        with self.lock:
            due = sum(expected_merges(n) for t, n in self.loads.items() if t != BROKEN)
        return due - self.results.healthy_successes()

    def _run(self, index: int) -> None:
        mine = self.tables[index :: len(self._threads)]
        turn = 0
        while not self.stopping.is_set():
            if self.store_down.is_set() or self.owed() > self.max_owed:
                self.stopping.wait(0.2)
                with self.lock:
                    self.waited_s += 0.2
                continue
            table = mine[turn % len(mine)]
            turn += 1
            began = time.monotonic()
            if self._load(self._loaders[index], table, self.loads[table]):
                ended = time.monotonic()
                with self.lock:
                    self.loads[table] += 1
                    self.timed.append((ended, ended - began))

    def _load(self, loader: ArrowLoader, table: str, n: int) -> bool:
        start = JAN + timedelta(hours=n)
        while not self.stopping.is_set():
            try:
                loader.load(
                    table, load_rows(table, n), start, start + timedelta(hours=1), segment_id=f"l{n:06d}"
                )
                return True
            except Exception as exc:  # the broker paused, a commit race: the same load again
                with self.lock:
                    self.retries += 1
                print(f"  load {table}/{n}: {type(exc).__name__}: {str(exc)[:120]}; again", flush=True)
                self.stopping.wait(1.0)
        return False  # stopped before it was committed and announced: it never happened

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stopping.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=120)
        for loader in self._loaders:
            loader.close()


# -- samples -------------------------------------------------------------------------------------


@dataclass
class Sample:
    """The job's driver, every `sample_every` merges."""

    merges: int
    start: int  # the job's start (1, 2, ...) it was taken in
    since_start: int  # merges since that start
    seconds: float
    python_pss_mib: float | None
    jvm_pss_mib: float | None
    heap_after_gc_mib: float | None
    jvm_native_mib: float | None
    python_threads: int | None
    jvm_threads: int | None
    files: dict[str, Any] = field(default_factory=dict)
    commit_cache_mib: float | None = None  # the job's parsed commits, as MiB of their text
    # the driver's Python memory by allocator (compactor_driver_memory_bytes): malloc_in_use,
    # malloc_free (fragmentation), arrow_pool
    python_memory_mib: dict[str, float] = field(default_factory=dict)
    python_blocks: int | None = None  # blocks Python's allocator holds: its objects, counted
    owed: int = 0  # merges the loads so far make due that have no result yet: the backlog

    @property
    def driver_pss_mib(self) -> float | None:
        if self.python_pss_mib is None or self.jvm_pss_mib is None:
            return None
        return self.python_pss_mib + self.jvm_pss_mib


def _full_at(at: dict[str, int] | None) -> str:
    return (
        "never" if at is None else f"merge {at['merges']:,}, {at['since_start']:,} into start {at['start']}"
    )


def _commit_cache_mib(metrics: dict[str, float]) -> float | None:
    """The commit text behind the job's parsed commits, over its shards (None: no answer)."""
    held = samples_of(metrics, "compactor_commit_cache_bytes")
    return round(sum(held.values()) / 2**20, 2) if held else None


def _python_memory_mib(metrics: dict[str, float]) -> dict[str, float]:
    found = (
        (re.search(r'kind="(\w+)"', k), v)
        for k, v in samples_of(metrics, "compactor_driver_memory_bytes").items()
    )
    return {m.group(1): round(v / 2**20, 1) for m, v in found if m}


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _memory_of(kind: str) -> Callable[[Sample], float | None]:
    return lambda s: s.python_memory_mib.get(kind)


def cache_full(s: Sample) -> bool:
    """Has the commit cache reached its budget (the driver's largest bounded store: until it
    has, Python's memory grows by design, about five bytes for each byte of text it takes)?"""
    from compactor.delta.log.reader import COMMIT_CACHE_BYTES

    return s.commit_cache_mib is not None and s.commit_cache_mib >= 0.95 * COMMIT_CACHE_BYTES / 2**20


def slope_per_1000(
    samples: list[Sample], value: Callable[[Sample], float | None], warmup: int
) -> float | None:
    """Least-squares slope of `value` per 1,000 merges, pooled within each start of the job (each
    start has its own intercept: a restart sets memory back), leaving out each start's warm-up."""
    groups: dict[int, list[tuple[float, float]]] = {}
    for s in samples:
        y = value(s)
        if y is not None and s.since_start >= warmup:
            groups.setdefault(s.start, []).append((float(s.merges), float(y)))
    num = den = 0.0
    for points in groups.values():
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        num += sum((x - mx) * (y - my) for x, y in points)
        den += sum((x - mx) ** 2 for x, _ in points)
    return num / den * 1000 if den > 0 else None


def file_counts(services: Services, tables: list[str]) -> dict[str, Any]:
    """Files under `_compactor/` (by folder); per table and for the catalog table, the commits in
    its log since its last checkpoint, and its log's files in all."""
    s3 = services.store.s3()
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{WAREHOUSE}/"):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    state = [
        k.removeprefix(f"{WAREHOUSE}/_compactor/") for k in keys if k.startswith(f"{WAREHOUSE}/_compactor/")
    ]

    def since_checkpoint(prefix: str) -> tuple[int, int]:
        log = [k for k in keys if k.startswith(f"{prefix}/_delta_log/")]
        names = [Path(k).name for k in log]
        versions = [int(n.split(".")[0]) for n in names if re.fullmatch(r"\d{20}\.json", n)]
        checkpoint = -1
        with contextlib.suppress(Exception):
            body = s3.get_object(Bucket=BUCKET, Key=f"{prefix}/_delta_log/_last_checkpoint")["Body"].read()
            checkpoint = int(json.loads(body)["version"])
        return (max(versions) - checkpoint if versions else 0), len(log)

    per_table = {t: since_checkpoint(f"{WAREHOUSE}/{t}") for t in tables}
    catalog_since, catalog_log = since_checkpoint(f"{WAREHOUSE}/_compactor/catalog")
    return {
        "compactor_files": len(state),
        "compactor_files_by_folder": dict(sorted(Counter(k.split("/")[0] for k in state).items())),
        "catalog_commits_since_checkpoint": catalog_since,
        "catalog_log_files": catalog_log,
        "table_commits_since_checkpoint_max": max((s for s, _ in per_table.values()), default=0),
        # which table, and the job's own count of it (its gauge), to tell a lagging maintainer
        # from a `_last_checkpoint` another writer set back
        "table_furthest_past_checkpoint": max(per_table, key=lambda t: per_table[t][0], default=None),
        "table_log_files_max": max((n for _, n in per_table.values()), default=0),
    }


# -- the checks at the end -----------------------------------------------------------------------


def row_fingerprint(frame: pd.DataFrame) -> tuple[int, int]:
    """(rows, sum of each row's pandas hash mod 2^64): equal for equal multisets of rows."""
    import pandas as pd

    if len(frame) == 0:
        return 0, 0
    hashes = pd.util.hash_pandas_object(frame[["load", "k", "v", "note"]], index=False)
    return len(frame), int(hashes.to_numpy().sum(dtype="uint64"))


def conservation(
    services: Services, loads: dict[str, int], deleted: set[tuple[str, int, int]]
) -> dict[str, Any]:
    """Each table's rows (read by delta-rs) against its loads, less the other writer's deletes."""
    import pandas as pd
    from deltalake import DeltaTable

    per_table: dict[str, dict[str, Any]] = {}
    for table, n in loads.items():
        if not n:
            continue
        want = pd.concat([load_rows(table, i).to_pandas() for i in range(n)], ignore_index=True)
        keep = [(table, a, b) not in deleted for a, b in zip(want["load"], want["k"], strict=True)]
        want = want[keep]
        uri = f"s3://{BUCKET}/{WAREHOUSE}/{table}"
        got = (
            DeltaTable(uri, storage_options=services.store.storage_options())
            .to_pyarrow_table(columns=["load", "k", "v", "note"])
            .to_pandas()
        )
        counts = Counter(zip(got["load"].tolist(), got["k"].tolist(), strict=True))
        wanted = set(zip(want["load"].tolist(), want["k"].tolist(), strict=True))
        per_table[table] = {
            "loads": n,
            "rows_expected": len(want),
            "rows": len(got),
            "lost": len(wanted - set(counts)),
            "doubled": sum(c - 1 if k in wanted else c for k, c in counts.items()),
            "fingerprint_matches": row_fingerprint(want) == row_fingerprint(got),
            "deleted": sum(1 for t, _, _ in deleted if t == table),
        }
    return per_table


STEADY_WARMUP_S = 300.0  # after the first merge, before the first window
STEADY_WINDOW_S = 600.0


def steady_rate(
    times: list[float],
    began: float,
    first: float | None,
    last: float | None,
    samples: list[Sample],
    loads: list[tuple[float, float]],
) -> dict[str, Any] | None:
    """Merges a minute in the first 10 minutes after a warm-up and in the last 10 of the loads, and
    the backlog (merges owed) at the samples nearest each window's end; the loads a minute and
    the mean seconds a load took in each (`loads`: when each ended and how long it took): with
    no backlog, the loads set the pace. None for a run too short."""
    if first is None or last is None or last - first < STEADY_WARMUP_S + 2 * STEADY_WINDOW_S:
        return None
    windows = {
        "first": (first + STEADY_WARMUP_S, first + STEADY_WARMUP_S + STEADY_WINDOW_S),
        "last": (last - STEADY_WINDOW_S, last),
    }
    rates = {k: sum(a <= t < b for t in times) / (STEADY_WINDOW_S / 60) for k, (a, b) in windows.items()}

    def owed_near(at: float) -> int | None:
        near = min(samples, key=lambda s: abs(s.seconds - (at - began)), default=None)
        return None if near is None else near.owed

    in_window = {k: [d for t, d in loads if a <= t < b] for k, (a, b) in windows.items()}
    return {
        "loads_per_min": {k: round(len(v) / (STEADY_WINDOW_S / 60), 2) for k, v in in_window.items()},
        "seconds_per_load": {k: round(sum(v) / len(v), 3) if v else None for k, v in in_window.items()},
        "merges_per_min": {k: round(v, 2) for k, v in rates.items()},
        "last_vs_first": round(rates["last"] / rates["first"], 3) if rates["first"] else None,
        "owed_at_window_end": {k: owed_near(b) for k, (_, b) in windows.items()},
    }


def plan_trails(text: str, plan_ids: list[str], most: int = 12) -> dict[str, list[str]]:
    """The job log's lines naming each plan (the last `most`, with the starts between them): what
    a failed check needs to be told apart from a slow one on a machine far away (CI)."""
    trails: dict[str, list[str]] = {}
    for plan_id in plan_ids:
        lines = [line[:300] for line in text.splitlines() if plan_id in line or line.startswith(START_BANNER)]
        trails[plan_id] = lines[-most:]
    return trails


def log_findings(text: str, healthy: list[str]) -> dict[str, Any]:
    """What the job's own log says happened, over all its starts."""
    quarantined = re.findall(
        r"table (\w+) quarantined after (\d+) failures in a row \(last: (.*?)\); no attempt", text, re.S
    )
    cancelled = re.findall(r"plan \S+ of table (\w+) ran \d+s, past its bound", text)
    return {
        "outages_declared": len(re.findall(r"outage since .*? no table is quarantined for it", text)),
        "outages_over": len(
            re.findall(r"outage of .*? over: (?:table \w+ succeeded|the shard started again)", text)
        ),
        "quarantined": [{"table": t, "streak": int(n), "reason": why[:400]} for t, n, why in quarantined],
        "healthy_quarantined": sorted({t for t, _, _ in quarantined if t in healthy}),
        "released_as_config_changed": re.findall(
            r"table (\w+): released from quarantine: its config changed", text
        ),
        "hung_cancelled": dict(Counter(cancelled)),
        "threads_written_off": text.count("written off (its merge hung)"),
        "query_failures": len(re.findall(r"the streaming query failed \(\d+ in a row\)", text)),
        "lost_sessions": len(re.findall(r"lost shard\(s\)", text)),
        "rejoins": len(re.findall(r"rejoined", text)),
        "died_during_merge": text.count("JobDied: the job stopped while plan"),
    }


# -- the run -------------------------------------------------------------------------------------


def schedule(shape: Shape) -> list[tuple[int, str]]:
    """(merges reached, fault), spread between `faults_from` and `faults_to` of the merges, the
    kinds taking turns."""
    counts = {"outage": shape.outages, "delete": shape.deletes, "kill": shape.kills, "pause": shape.pauses}
    turns = [kind for i in range(max(counts.values())) for kind, n in counts.items() if n > i]
    if not turns:
        return []
    first, last = shape.faults_from * shape.merges, shape.faults_to * shape.merges
    step = (last - first) / max(1, len(turns) - 1)
    return [(max(1, int(first + i * step)), kind) for i, kind in enumerate(turns)]


@dataclass
class Run:
    """One run's moving parts and what it noted on the way."""

    shape: Shape
    services: Services
    kafka: KafkaSettings
    healthy: list[str]
    tables: list[str]
    job: JobProcess
    results: FollowedResults
    loader: Loader
    samples: list[Sample] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    deleted: set[tuple[str, int, int]] = field(
        default_factory=set
    )  # (table, load, k) the other writer deleted
    start_merges: dict[int, int] = field(default_factory=lambda: {1: 0})  # job start -> merges before it
    began: float = field(default_factory=time.monotonic)
    first_merge: float | None = None  # monotonic
    loads_stopped: float | None = None

    def merges(self) -> int:
        return self.results.successes()

    def started_again(self) -> None:
        if not self.shape.hang_after_restarts:
            self.job.env.pop("COMPACTOR_HANG", None)
        self.job.start()
        self.start_merges[self.job.starts] = self.merges()

    def sample(self) -> None:
        python, java = self.job.pids()
        merges = self.merges()
        s = Sample(
            merges=merges,
            start=self.job.starts,
            since_start=merges - self.start_merges[self.job.starts],
            seconds=round(time.monotonic() - self.began, 1),
            python_pss_mib=pss_mib(python),
            jvm_pss_mib=pss_mib(java),
            heap_after_gc_mib=heap_after_gc_mib(java),
            jvm_native_mib=jvm_native_mib(java),
            python_threads=threads(python),
            jvm_threads=threads(java),
            files=file_counts(self.services, self.tables),
            owed=self.loader.owed(),
            commit_cache_mib=_commit_cache_mib(metrics := self.job.metrics()),
            python_memory_mib=_python_memory_mib(metrics),
            python_blocks=_int(metrics.get("compactor_driver_python_blocks")),
        )
        self.samples.append(s)
        print(
            f"  [{s.seconds:5.0f}s] {merges:>5} merges (start {s.start}): PSS Python "
            f"{_f(s.python_pss_mib)} MiB, JVM {_f(s.jvm_pss_mib)} MiB; heap after GC "
            f"{_f(s.heap_after_gc_mib)} MiB, native {_f(s.jvm_native_mib)} MiB; threads {s.python_threads}/{s.jvm_threads}; _compactor/ files "
            f"{s.files['compactor_files']}; log commits since checkpoint: tables "
            f"{s.files['table_commits_since_checkpoint_max']} ({s.files['table_furthest_past_checkpoint']}), catalog "
            f"{s.files['catalog_commits_since_checkpoint']}; commit cache {_f(s.commit_cache_mib)} MiB; "
            + ", ".join(f"{k} {_f(v)} MiB" for k, v in s.python_memory_mib.items())
            + f"; Python blocks {s.python_blocks or 0:,}",
            flush=True,
        )

    def strike(self, kind: str) -> None:
        """One fault, and what it took."""
        at, began = self.merges(), time.monotonic()
        done: dict[str, Any] = {"fault": kind, "at_merges": at, "at_s": round(began - self.began)}
        print(f"  [{began - self.began:5.0f}s] fault: {kind} at {at} merges", flush=True)
        if kind == "outage":
            self.loader.store_down.set()  # the loaders cannot reach it either; what they sent is still to do
            try:
                with self.services.store.store_cut():
                    time.sleep(self.shape.outage_s)
            finally:
                self.loader.store_down.clear()
            done["seconds_cut"] = self.shape.outage_s
        elif kind == "kill":
            self.job.kill()
            self.results.restart()  # a consumer of the results restarted too
            self.started_again()
        elif kind == "pause" and self.services.broker is not None:
            from compactor.kafka.lease import SESSION_TIMEOUT_MS

            paused = SESSION_TIMEOUT_MS / 1000 + 5
            pid = self.services.broker.pid
            assert pid is not None  # started with the services
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(paused)
            finally:
                os.kill(pid, signal.SIGCONT)
            done["seconds_paused"] = paused
        elif kind == "pause":
            done["skipped"] = "KAFKA_BOOTSTRAP_SERVERS names a broker this run does not own"
        elif kind == "delete":
            done |= self.delete_rows()
        done["seconds"] = round(time.monotonic() - began, 1)
        done["ended"] = time.monotonic()  # the first merge after it: see `report`
        self.faults.append(done)

    def delete_rows(self) -> dict[str, Any]:
        """Another writer's DELETE (delta-rs) of a quarter of one load's rows in `DELETED`, tried
        again when a merge's commit comes first, and checked afterwards."""
        from deltalake import DeltaTable

        with self.loader.lock:
            loads = self.loader.loads[DELETED]
        if loads < 3:
            return {"skipped": "too few loads yet"}
        n, cut = loads - 2, ROWS // 4
        uri = f"s3://{BUCKET}/{WAREHOUSE}/{DELETED}"
        predicate = f"load = {n} AND k < {cut}"
        for tries in range(1, 21):
            try:
                DeltaTable(uri, storage_options=self.services.store.storage_options()).delete(predicate)
            except Exception as exc:  # a merge committed first: read the table again and retry
                print(f"  delete: {type(exc).__name__}: {str(exc)[:120]}; again", flush=True)
                time.sleep(0.5)
                continue
            left = DeltaTable(uri, storage_options=self.services.store.storage_options()).to_pyarrow_table(
                columns=["k"], filters=[("load", "=", n), ("k", "<", cut)]
            )
            if left.num_rows == 0:
                self.deleted.update((DELETED, n, k) for k in range(cut))
                return {"table": DELETED, "predicate": predicate, "rows": cut, "tries": tries}
        return {"table": DELETED, "predicate": predicate, "failed_after_tries": 20}

    def drain(self) -> bool:
        """Until the job is idle: no merge running, no event behind, and no new result for longer
        than the longest cool-down (16 periods)."""
        began, last, quiet_since = time.monotonic(), -1, time.monotonic()
        while time.monotonic() - began < self.shape.drain_s:
            if not self.job.alive():
                self.job.note_exit(at_merges=self.merges())
                self.started_again()
            now = self.results.outcomes()
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif (
                time.monotonic() - quiet_since >= 16 * COOL_DOWN_S + 4
                and self.job.idle()
                and self.job.serving()
            ):
                return True
            time.sleep(1)
        return False


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    # run_all.py's timeout sends SIGTERM: the job, the broker and the servers (sessions of their
    # own, out of its reach) are stopped on the way out, as on Ctrl-C
    signal.signal(signal.SIGTERM, _interrupted)
    parser = bench_parser(__doc__, "6 tables, about 16 merges, each fault once")
    parser.add_argument("--tables", type=int, help="healthy tables (full run: 56)")
    parser.add_argument("--merges", type=int, help="merges to reach (full run: 5000)")
    parser.add_argument(
        "--minutes",
        type=float,
        help="stop loading this long after the first merge, merges reached or not (full run: 120)",
    )
    parser.add_argument("--no-faults", action="store_true", help="no fault at all: the steady rate alone")
    parser.add_argument(
        "--s3-server", choices=S3_SERVERS, default=S3_SERVERS[0], help="the S3 API server (default gofakes3)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory, the job's log and the bucket"
    )
    args = parser.parse_args()
    shape = QUICK if args.quick else FULL
    given = {"tables": args.tables, "merges": args.merges, "minutes": args.minutes}
    shape = replace(shape, **{k: v for k, v in given.items() if v is not None})
    if args.no_faults:
        shape = replace(shape, outages=0, kills=0, pauses=0, deletes=0, hang_every=-1)
    if shape.tables < 4:
        raise SystemExit("--tables: at least 4 (three of them have a part in the faults)")
    work = Path(tempfile.mkdtemp(prefix="compactor-years-"))
    print(
        f"years: {shape.tables} healthy tables and a failing one, {shape.merges:,} merges; work {work}",
        flush=True,
    )
    began = time.monotonic()
    store = ProxiedS3(work, BUCKET, args.s3_server)
    try:
        with kafka_broker(work) as (bootstrap, broker):
            store.start()
            payload = run(shape, work, Services(store, bootstrap, broker))
            if args.keep:
                store.dump(work / "bucket")
    finally:
        store.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    payload["total_seconds"] = round(time.monotonic() - began, 1)
    print(f"\ntotal {payload['total_seconds']:.0f}s" + (f"; kept {work}" if args.keep else ""))
    save_results("years", args.quick, payload)
    if payload["failures"]:
        for plan_id, lines in payload["results"].get("trails", {}).items():
            print(f"\nthe job log on plan {plan_id}:\n  " + "\n  ".join(lines))
        print("FAILED: " + "; ".join(payload["failures"]))
        raise SystemExit(1)


def run(shape: Shape, work: Path, services: Services) -> dict[str, Any]:
    from compactor.kafka.settings import KafkaSettings
    from compactor.kafka.topics import ensure_topics

    healthy = [f"t{i:02d}" for i in range(shape.tables)]
    prefix = f"years-{uuid.uuid4().hex[:6]}"
    kafka = KafkaSettings(services.bootstrap, f"{prefix}.segments", f"{prefix}.results", f"{prefix}.dead")
    ensure_topics(kafka, [kafka.segments_topic, kafka.results_topic, kafka.dead_letter_topic])
    config = work / "tables.yaml"
    config.write_text(config_yaml(services.store.proxy_port))
    # the driver's hang outlasts its bound (its thread comes back later); the task's is cancelled
    driver, task = f"{3 * MERGE_TIMEOUT_S}:{shape.hang_every}", f"3600:{shape.hang_every}"
    hang = f"{HANG_DRIVER}:driver:{driver},{HANG_TASK}:task:{task}"
    env = {
        **os.environ,
        "SPARK_CONF_DIR": str(spark_conf_dir(work)),
        **({"COMPACTOR_HANG": hang} if shape.hang_every >= 0 else {}),
    }
    args = [
        *run_args(config, f"s3a://{BUCKET}/{WAREHOUSE}", work / "checkpoint", kafka),
        "--master",
        "local[2]",
    ]
    results = FollowedResults(kafka, healthy=lambda table: table != BROKEN)
    tables = [*healthy, BROKEN]
    loader = Loader(services, kafka, tables, results, max(6, 2 * shape.tables), shape.loaders)
    r = Run(shape, services, kafka, healthy, tables, JobProcess(args, work / "job.log", env), results, loader)
    plan = schedule(shape)
    # on a slow machine each fault also strikes at its share of `minutes`; but only once the job
    # has merged again since the last fault (or exit) and run `fault_gap_s` since, and none in the
    # last fifth of the time
    share = [
        shape.faults_from + i * (shape.faults_to - shape.faults_from) / max(1, len(plan) - 1)
        for i in range(len(plan))
    ]
    slots = {len(plan) - i: shape.minutes * 0.8 * f for i, f in enumerate(share)}  # faults left -> minutes
    recovered_at = 1  # merges that show the job works again
    healthy_since: float | None = None  # when it merged again after the last fault
    first_merge: float | None = None
    r.job.start()
    results.start()
    loader.start()
    next_sample = shape.sample_every
    try:
        while True:
            if not r.job.alive():
                r.job.note_exit(at_merges=r.merges())
                print(f"  the job exited by itself: {r.job.exits[-1]}; started again", flush=True)
                r.started_again()
                recovered_at, healthy_since = r.merges() + 1, None
            if healthy_since is None and r.merges() >= recovered_at:
                healthy_since = time.monotonic()
            if r.merges() >= next_sample:
                r.sample()
                next_sample = (r.merges() // shape.sample_every + 1) * shape.sample_every
            if first_merge is None and r.merges():
                first_merge = r.first_merge = time.monotonic()
            minutes = (time.monotonic() - first_merge) / 60 if first_merge is not None else 0.0
            due = plan and (r.merges() >= plan[0][0] or minutes >= slots[len(plan)])
            settled = healthy_since is not None and time.monotonic() - healthy_since >= shape.fault_gap_s
            if due and settled and minutes < 0.8 * shape.minutes:
                r.strike(plan.pop(0)[1])
                recovered_at, healthy_since = r.merges() + 1, None
                continue
            startup = time.monotonic() - r.began
            never = first_merge is None and startup > 900  # no merge at all in 15 minutes
            if (r.merges() >= shape.merges and not plan) or minutes >= shape.minutes or never:
                break
            time.sleep(0.5)
        loader.close()
        stopped = r.loads_stopped = time.monotonic()
        drained = r.drain()
        drain_s = time.monotonic() - stopped
        print(
            f"  loads stopped; the job {'idle' if drained else 'NOT idle'} after {drain_s:.0f}s", flush=True
        )
        r.sample()
        states: dict[str, float] = {}
        for _ in range(5):
            states = {k: v for k, v in r.job.metrics().items() if k.startswith("compactor_table_state{")}
            if states:
                break
            time.sleep(2)
        jvm_threads_by_name = jvm_thread_names(r.job.pids()[1])
        exit_code = r.job.stop(shape.stop_s)
        raw = raw_results(r.kafka)
        if not results.catch_up(raw, timeout_s=CATCH_UP_S):
            print(
                f"  the results follower had not taken every result {CATCH_UP_S:.0f}s after the stop",
                flush=True,
            )
    finally:
        loader.close()
        r.job.kill()
        results.close()
    run_s = time.monotonic() - r.began
    return report(r, raw, states, drained, round(drain_s, 1), exit_code, run_s, plan) | {
        "jvm_threads_by_name_at_end": jvm_threads_by_name,
        "table_states_at_end": {k.split("{", 1)[1].rstrip("}"): v for k, v in states.items() if v},
    }


def report(
    r: Run,
    raw: list[dict[str, Any]],
    states: dict[str, float],
    drained: bool,
    drain_s: float,
    exit_code: int | None,
    run_s: float,
    missed_faults: list[tuple[int, str]],
) -> dict[str, Any]:
    shape = r.shape
    rows = conservation(r.services, r.loader.loads, r.deleted)
    results = results_check(
        r.results.given,
        raw,
        merge_commits(
            [f"s3://{BUCKET}/{WAREHOUSE}/{t}" for t in r.tables], r.services.store.storage_options()
        ),
    )
    job_log = r.job.log.read_text(errors="replace")
    logged = log_findings(job_log, r.healthy)
    examples = results["examples"]
    results["trails"] = plan_trails(
        job_log, [*examples["succeeded_without_commit"], *examples["committed_without_success"]]
    )
    labelled = [dict(re.findall(r'(\w+)="([^"]*)"', k)) for k, v in states.items() if v == 1]
    quarantined_now = sorted(x["table"] for x in labelled if x.get("state") == "quarantined" and "table" in x)
    healthy_quarantined = sorted(set(logged["healthy_quarantined"]) | (set(quarantined_now) & set(r.healthy)))
    broken = [q for q in logged["quarantined"] if q["table"] == BROKEN]
    after = [s for s in r.samples if s.since_start >= shape.warmup]
    slopes = {
        "rss_slope_mib_per_1000_merges": slope_per_1000(r.samples, lambda s: s.driver_pss_mib, shape.warmup),
        "python_pss_slope_mib_per_1000_merges": slope_per_1000(
            r.samples, lambda s: s.python_pss_mib, shape.warmup
        ),
        # the same once the commit cache is full: what grows with history, not with the cache's fill
        "python_pss_slope_cache_full_mib_per_1000_merges": slope_per_1000(
            r.samples, lambda s: s.python_pss_mib if cache_full(s) else None, shape.warmup
        ),
        # where Python's memory went: live C blocks, the allocator's kept free ones, Arrow's pool
        **{
            f"python_{kind}_slope_mib_per_1000_merges": slope_per_1000(
                r.samples, _memory_of(kind), shape.warmup
            )
            for kind in PYTHON_MEMORY_KINDS
        },
        "python_blocks_slope_per_1000_merges": slope_per_1000(
            r.samples, lambda s: s.python_blocks, shape.warmup
        ),
        "jvm_pss_slope_mib_per_1000_merges": slope_per_1000(r.samples, lambda s: s.jvm_pss_mib, shape.warmup),
        "heap_slope_mib_per_1000_merges": slope_per_1000(
            r.samples, lambda s: s.heap_after_gc_mib, shape.warmup
        ),
        "jvm_native_slope_mib_per_1000_merges": slope_per_1000(
            r.samples, lambda s: s.jvm_native_mib, shape.warmup
        ),
        "python_threads_slope_per_1000_merges": slope_per_1000(
            r.samples, lambda s: s.python_threads, shape.warmup
        ),
        "jvm_threads_slope_per_1000_merges": slope_per_1000(r.samples, lambda s: s.jvm_threads, shape.warmup),
        "compactor_files_slope_per_1000_merges": slope_per_1000(
            r.samples, lambda s: s.files["compactor_files"], shape.warmup
        ),
    }
    merges = results["succeeded_plans"]
    for fault in r.faults:
        ended = fault.pop("ended")
        after_it = [t for t in r.results.success_times if t > ended]
        fault["next_merge_after_s"] = round(min(after_it) - ended, 1) if after_it else None
    payload: dict[str, Any] = {
        "tables": len(r.tables),
        "healthy_tables": len(r.healthy),
        "merges": merges,
        "loads": sum(r.loader.loads.values()),
        "rows_loaded": ROWS * sum(r.loader.loads.values()),
        "rows_deleted_by_another_writer": len(r.deleted),
        "rows_lost": sum(t["lost"] for t in rows.values()),
        "rows_duplicated": sum(t["doubled"] for t in rows.values()),
        "fingerprints_match": all(t["fingerprint_matches"] for t in rows.values()),
        "healthy_quarantined": len(healthy_quarantined),
        "healthy_quarantined_tables": healthy_quarantined,
        "failing_table_quarantined_at_end": BROKEN in quarantined_now,
        # the first line: pyarrow's error text goes on to print the rows themselves
        "failing_table_reason": broken[-1]["reason"].splitlines()[0] if broken else None,
        "failing_table_reason_holds_row_values": bool(broken) and "\n" in broken[-1]["reason"],
        **slopes,
        "warmup_merges": shape.warmup,
        "samples_after_warmup": len(after),
        "first_sample_with_commit_cache_full": next(
            (
                {"merges": s.merges, "start": s.start, "since_start": s.since_start}
                for s in r.samples
                if cache_full(s)
            ),
            None,
        ),
        "starts_after_warmup": len({s.start for s in after}),
        "python_threads_after_warmup": _span(after, lambda s: s.python_threads),
        "jvm_threads_after_warmup": _span(after, lambda s: s.jvm_threads),
        "files_max": {
            key: max((s.files[key] for s in r.samples), default=0)
            for key in (
                "compactor_files",
                "catalog_commits_since_checkpoint",
                "table_commits_since_checkpoint_max",
                "table_log_files_max",
            )
        },
        "files_at_end": r.samples[-1].files if r.samples else {},
        "results": results,
        "job_log": logged,
        "faults": r.faults,
        "faults_not_struck": [kind for _, kind in missed_faults],
        "job_starts": r.job.starts,
        "job_exits_on_its_own": r.job.exits,
        "job_exit_code_on_sigterm": exit_code,
        "drained": drained,
        "drain_seconds": drain_s,
        "loader_retries": r.loader.retries,
        "loader_waited_s": round(r.loader.waited_s / r.shape.loaders, 1),
        "follower_restarts": r.results.restarts,
        "run_seconds": round(run_s, 1),
        "merges_per_second": round(merges / run_s, 3) if run_s else None,
        "steady": steady_rate(
            r.results.success_times, r.began, r.first_merge, r.loads_stopped, r.samples, r.loader.timed
        ),
        "settings": {
            "cool_down_s": COOL_DOWN_S,
            "quarantine_after": QUARANTINE_AFTER,
            "merge_timeout_s": MERGE_TIMEOUT_S,
            "rows_per_load": ROWS,
            "rule": "minor [2, 2]",
        },
        "shape": asdict(shape),
        "per_table": rows,
        "samples": [{**asdict(s), "driver_pss_mib": s.driver_pss_mib} for s in r.samples],
        "machine": machine_info(),
    }
    payload["failures"] = failures(payload)
    payload["missed"] = missed(payload, shape)
    print_report(payload)
    payload["verdicts"] = judge(TARGETS, figures(payload))
    return payload


def figures(p: dict[str, Any]) -> dict[str, float | None]:
    """The figures the targets judge, from the run's payload."""
    steady, files, shape = p.get("steady") or {}, p["files_max"], p["shape"]
    # the steady rate is a target of a run without faults (#51's hour): a kill or an outage in a
    # window takes a minute of merges out of it
    faulted = any(shape[k] for k in ("outages", "kills", "pauses", "deletes")) or shape["hang_every"] >= 0
    return {
        "healthy_quarantined": p["healthy_quarantined"],
        "job_exits_on_its_own": len(p["job_exits_on_its_own"]),
        "rss_slope_mib_per_1000_merges": p["rss_slope_mib_per_1000_merges"],
        "heap_slope_mib_per_1000_merges": p["heap_slope_mib_per_1000_merges"],
        "steady_last_vs_first": None if faulted else steady.get("last_vs_first"),
        "table_commits_since_checkpoint": files["table_commits_since_checkpoint_max"],
        "catalog_commits_since_checkpoint": files["catalog_commits_since_checkpoint"],
    }


def _span(samples: list[Sample], value: Callable[[Sample], int | None]) -> list[int] | None:
    values = [v for s in samples if (v := value(s)) is not None]
    return [min(values), max(values)] if values else None


def failures(p: dict[str, Any]) -> list[str]:
    """Rows or results wrong: the run fails, whatever its size."""
    found = []
    if p["rows_lost"] or p["rows_duplicated"] or not p["fingerprints_match"]:
        found.append(f"rows lost {p['rows_lost']}, doubled {p['rows_duplicated']}")
    r = p["results"]
    if r["given_twice"] or r["never_given"]:
        found.append(f"results given twice {r['given_twice']}, never given {r['never_given']}")
    if r["succeeded_without_commit"] or r["commits_without_success"] or r["plans_committed_twice"]:
        found.append(
            f"plans succeeded without a commit {r['succeeded_without_commit']}, committed without a success "
            f"{r['commits_without_success']}, committed twice {r['plans_committed_twice']}"
        )
    return found


def missed(p: dict[str, Any], shape: Shape) -> list[str]:
    """What the run's shape asked and did not get, beside the targets (printed and saved; the run
    does not fail)."""
    found = []
    if not p["failing_table_quarantined_at_end"]:
        found.append("the failing table was not quarantined at the end")
    if not p["drained"]:
        found.append("the job was not idle after the loads stopped")
    if p["merges"] < shape.merges or p["faults_not_struck"]:
        found.append(f"{p['merges']} merges of {shape.merges}; faults not struck: {p['faults_not_struck']}")
    return found


def print_report(p: dict[str, Any]) -> None:
    r, log, files = p["results"], p["job_log"], p["files_max"]
    bound = {t.key: f"{'<=' if t.at_most else '>='} {t.bound:g}" for t in TARGETS}
    print(
        f"\n{p['tables']} tables, {p['loads']:,} loads, {p['merges']:,} merges in {p['run_seconds']:.0f}s "
        f"({p['merges_per_second']} merges/s), {p['job_starts']} job start(s)\n"
    )
    rows = [
        ["rows lost / doubled", f"{p['rows_lost']} / {p['rows_duplicated']}", "0 / 0"],
        ["row fingerprints match", p["fingerprints_match"], True],
        [
            "results sent / outcomes / given out",
            f"{r['results_sent']} / {r['outcomes']} / {r['given_to_follower']}",
            "",
        ],
        ["outcomes given twice / never", f"{r['given_twice']} / {r['never_given']}", "0 / 0"],
        [
            "SUCCEEDED w/o commit / commit w/o SUCCEEDED / twice",
            f"{r['succeeded_without_commit']} / {r['commits_without_success']} / "
            f"{r['plans_committed_twice']}",
            "0 / 0 / 0",
        ],
        ["healthy tables quarantined", p["healthy_quarantined"], bound["healthy_quarantined"]],
        ["failing table quarantined at the end", p["failing_table_quarantined_at_end"], True],
        [
            "slopes fitted from each start's merge",
            f"{p['warmup_merges']:,} ({p['samples_after_warmup']} samples, {p['starts_after_warmup']} start(s))",
            "",
        ],
        [
            "driver PSS, MiB / 1,000 merges",
            _s(p["rss_slope_mib_per_1000_merges"]),
            bound["rss_slope_mib_per_1000_merges"],
        ],
        [
            "  of which Python / JVM",
            f"{_s(p['python_pss_slope_mib_per_1000_merges'])} / {_s(p['jvm_pss_slope_mib_per_1000_merges'])}",
            "",
        ],
        [
            "  Python: malloc in use / malloc kept free / Arrow pool",
            " / ".join(_s(p[f"python_{kind}_slope_mib_per_1000_merges"]) for kind in PYTHON_MEMORY_KINDS),
            "",
        ],
        [
            "  Python's allocator: blocks held / 1,000 merges",
            _s(p["python_blocks_slope_per_1000_merges"]),
            "",
        ],
        [
            "  Python once the commit cache is full",
            f"{_s(p['python_pss_slope_cache_full_mib_per_1000_merges'])} (full from "
            f"{_full_at(p['first_sample_with_commit_cache_full'])})",
            "",
        ],
        [
            "JVM heap after GC, MiB / 1,000 merges",
            _s(p["heap_slope_mib_per_1000_merges"]),
            bound["heap_slope_mib_per_1000_merges"],
        ],
        ["JVM native (not heap), MiB / 1,000 merges", _s(p["jvm_native_slope_mib_per_1000_merges"]), ""],
        [
            "threads Python / JVM after warm-up",
            f"{p['python_threads_after_warmup']} / {p['jvm_threads_after_warmup']}",
            "flat",
        ],
        [
            "_compactor/ files, most (per 1,000 merges)",
            f"{files['compactor_files']} ({_s(p['compactor_files_slope_per_1000_merges'])})",
            "bounded",
        ],
        [
            "table log commits past a checkpoint, most",
            files["table_commits_since_checkpoint_max"],
            bound["table_commits_since_checkpoint"],
        ],
        [
            "catalog log commits past a checkpoint, most",
            files["catalog_commits_since_checkpoint"],
            bound["catalog_commits_since_checkpoint"],
        ],
        ["outages declared / over", f"{log['outages_declared']} / {log['outages_over']}", ""],
        ["hung merges cancelled, by table", log["hung_cancelled"], ""],
        ["lost sessions / rejoins", f"{log['lost_sessions']} / {log['rejoins']}", ""],
        ["job exits on its own", len(p["job_exits_on_its_own"]), bound["job_exits_on_its_own"]],
    ]
    steady = p.get("steady")
    if steady:
        rate, owed = steady["merges_per_min"], steady["owed_at_window_end"]
        rows.append(
            [
                "merges a minute, first / last 10 min (owed)",
                f"{rate['first']} ({owed['first']}) / {rate['last']} ({owed['last']}): {steady['last_vs_first']}x",
                bound["steady_last_vs_first"],
            ]
        )
        per_min, took = steady["loads_per_min"], steady["seconds_per_load"]
        rows.append(
            [
                "loads a minute, first / last 10 min (s a load)",
                f"{per_min['first']} ({took['first']}) / {per_min['last']} ({took['last']})",
                "",
            ]
        )
    print_table(["check", "figure", "target"], rows, left=(0, 1, 2))
    print(f"\nfailing table's reason: {(p['failing_table_reason'] or '-')[:200]}")
    for fault in p["faults"]:
        print(f"fault: {fault}")
    for exit_ in p["job_exits_on_its_own"]:
        print(f"job exit: {exit_}")
    for item in p["missed"]:
        print(f"missed: {item}")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


if __name__ == "__main__":
    main()

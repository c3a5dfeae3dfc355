"""What a benchmark reads of a running process: resident memory of a process tree (peak, sampled),
CPU time of a tree, and of one JVM its heap after a full GC, its native memory and its threads
(through `jcmd`)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from harness.report import MIB


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
        # the CPU seconds this probe's own thread has used: reading a JVM's smaps_rollup walks its
        # page tables in the kernel (a tenth of a 40-table drain's CPU at 0.2 s), which a figure
        # of the job's CPU must leave out (`own_cpu`)
        self.own_cpu = 0.0
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
            self.own_cpu = time.thread_time()
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


@dataclass
class Tree:
    """CPU seconds of this process and its children (the JVM), read at two moments."""

    process: psutil.Process

    def cpu(self) -> float:
        total = 0.0
        for p in [self.process, *self.process.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + getattr(t, "children_user", 0) + getattr(t, "children_system", 0)
        return total


def pss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return float(psutil.Process(pid).memory_full_info().pss) / MIB
    except (psutil.Error, AttributeError):
        return None


def threads(pid: int | None) -> int | None:
    if pid is None:
        return None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return None


def heap_after_gc_mib(pid: int | None) -> float | None:
    """The JVM heap in use right after a full GC (`jcmd GC.run`, then `GC.heap_info`)."""
    if pid is None:
        return None
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120, check=True)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"total \d+K, used (\d+)K", info.stdout)
    return int(found.group(1)) / 1024 if found else None


# The job's JVM commits and touches its whole heap at start and tracks its native memory, so that
# the JVM's PSS grows only with what is not heap: G1 growing toward its maximum would otherwise
# read as a steady climb that stops only at -Xmx. The heap itself is measured after a full GC.
JVM_OPTIONS = "-Xms1g -XX:+AlwaysPreTouch -XX:NativeMemoryTracking=summary"


def spark_conf_dir(work: Path) -> Path:
    """A SPARK_CONF_DIR whose spark-defaults.conf starts the job's driver with `JVM_OPTIONS`
    (its heap stays Spark's default maximum, 1 GiB)."""
    conf = work / "spark-conf"
    conf.mkdir(exist_ok=True)
    (conf / "spark-defaults.conf").write_text(f"spark.driver.extraJavaOptions {JVM_OPTIONS}\n")
    return conf


def jvm_native_mib(pid: int | None) -> float | None:
    """The JVM's committed memory besides its heap (`jcmd VM.native_memory summary`): metaspace,
    code, threads, GC structures, buffers; what PSS growth of a pre-touched heap is made of."""
    if pid is None:
        return None
    try:
        out = subprocess.run(
            ["jcmd", str(pid), "VM.native_memory", "summary"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    total = re.search(r"Total: reserved=\d+KB, committed=(\d+)KB", out)
    heap = re.search(r"Java Heap \(reserved=\d+KB, committed=(\d+)KB\)", out)
    if total is None or heap is None:
        return None
    return (int(total.group(1)) - int(heap.group(1))) / 1024


def jvm_thread_names(pid: int | None) -> dict[str, int]:
    """The JVM's live threads by name, digits folded (`jcmd Thread.print`): what a growing count is."""
    if pid is None:
        return {}
    try:
        out = subprocess.run(
            ["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names = re.findall(r'^"([^"]*)"', out, re.M)
    return dict(Counter(re.sub(r"\d+", "N", n) for n in names).most_common(12))

"""The job as an operator runs it: `compactor run` in a process group of its own (its JVM with it),
started again on the same checkpoint when a scenario asks, its output appended to one log over all
its starts, read through its own /metrics and its log lines."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from harness.probes import Tree

if TYPE_CHECKING:
    from compactor.kafka.settings import KafkaSettings

COMPACTOR = str(Path(sys.executable).with_name("compactor"))
START_BANNER = "===== bench: start"  # the line the log gets before each start
RUNNING = "shard 0: running (started"  # the job's line once its shard's query runs
DOWN = ("the streaming query failed", "lost shard(s)")  # ... and those after which it does not


def free_port() -> int:
    from compactor.dev.broker_process import free_ports

    return int(free_ports(1, set())[0])


def run_args(
    config: Path | str, warehouse: Path | str, checkpoint: Path | str, kafka: KafkaSettings
) -> list[str]:
    """`compactor run`'s options for a job on `warehouse` with its own topics (`KafkaSettings`)."""
    return [
        "--config", str(config), "--warehouse", str(warehouse), "--checkpoint", str(checkpoint),
        "--bootstrap-servers", kafka.bootstrap_servers, "--segments-topic", kafka.segments_topic,
        "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
    ]  # fmt: skip


def query_runs(log: str) -> bool:
    """The log says the shard's query started, and not that it failed or was lost after that."""
    return log.rfind(RUNNING) > max(log.rfind(d) for d in DOWN)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text as `{name{labels}: value}`; comments and unparsable lines left out."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name and not line.startswith("#"):
            with contextlib.suppress(ValueError):
                found[name] = float(value)
    return found


def samples_of(metrics: dict[str, float], name: str) -> dict[str, float]:
    """A metric's samples in one scrape, by their labels (`{table="t1"}`; "" for one without)."""
    return {k.removeprefix(name): v for k, v in metrics.items() if k == name or k.startswith(name + "{")}


class JobProcess:
    """`compactor run *args`, its /metrics on a port of 127.0.0.1 chosen at each start.

    `marks` maps a name to a text of the job's log: the seconds from the latest start to the first
    line holding it are kept in `marks_at` (the restart benchmark splits a start at them)."""

    def __init__(
        self,
        args: list[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        marks: Mapping[str, str] | None = None,
    ) -> None:
        self.args, self.log = args, log
        self.env: dict[str, str] = dict(env if env is not None else os.environ)
        self.marks = dict(marks or {})
        self.marks_at: dict[str, float] = {}
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0
        self.started_at = 0.0  # monotonic
        self.exits: list[dict[str, Any]] = []  # each time it ended on its own, and how
        self._reader: threading.Thread | None = None

    def start(self) -> JobProcess:
        self.port = free_port()
        self.starts += 1
        self.marks_at = {}
        with self.log.open("a") as out:
            out.write(f"\n{START_BANNER} {self.starts} at {datetime.now(UTC):%H:%M:%S} =====\n")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [COMPACTOR, "run", *self.args, "--metrics-port", str(self.port), "--metrics-host", "127.0.0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=self.env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._copy, args=(self.proc,), name="job-log", daemon=True)
        self._reader.start()
        return self

    def _copy(self, proc: subprocess.Popen[str]) -> None:
        """The job's output into the log, line by line, noting when each mark first shows. The
        pipe is read to its end whatever happens to the log: a full pipe would stop the job."""
        assert proc.stdout is not None
        out: Any = self.log.open("a")
        for line in proc.stdout:
            for mark, text in self.marks.items():
                if mark not in self.marks_at and text in line:
                    self.marks_at[mark] = time.monotonic() - self.started_at
            if out is None:
                continue
            try:
                out.write(line)
                out.flush()
            except OSError as exc:  # a full disk: the rest of the output is dropped, said once
                print(f"the job's log {self.log} stopped: {exc}", file=sys.stderr, flush=True)
                with contextlib.suppress(OSError):
                    out.close()
                out = None
        if out is not None:
            out.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def this_start(self) -> str:
        """The log since the latest start."""
        return self.log.read_text(errors="replace").rsplit(START_BANNER, 1)[-1]

    def log_end(self, lines: int) -> str:
        """The last `lines` lines of the log since the latest start; once the job has ended, after
        the copy of its output reached the end (a failed start's last words are its reason)."""
        if self._reader is not None and not self.alive():
            self._reader.join(timeout=5)
        said = self.this_start().split("\n", 1)[-1]  # less the rest of the start's banner line
        return "\n".join(said.strip().splitlines()[-lines:])

    def serving(self) -> bool:
        """Its shard's query runs: started since the latest start, not failed or lost since."""
        return self.alive() and query_runs(self.this_start())

    def metrics(self) -> dict[str, float]:
        """Every sample of its /metrics ({} while it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as page:
                return parse_metrics(page.read().decode())
        except OSError:
            return {}

    def samples(self, name: str) -> dict[str, float]:
        """A metric's samples by their labels (`{table="t1"}`; "" for a sample without)."""
        return samples_of(self.metrics(), name)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples over all their labels (0 when it has none)."""
        return sum(self.samples(name).values())

    def idle(self) -> bool:
        """No merge running and no event behind, as its own metrics say."""
        found = self.metrics()
        busy = ("compactor_active_merges", "compactor_consumer_lag_events")
        return bool(found) and not any(v for k, v in found.items() if k.split("{")[0] in busy)

    def settled(self) -> bool:
        """Idle twice, two seconds apart: a merge's own completion event is on its way back for a
        moment after its commit."""
        if not self.idle():
            return False
        time.sleep(2.0)
        return self.idle()

    def note_exit(self, **context: Any) -> dict[str, Any]:
        """It ended on its own: how, from the end of its log (its one line, else the last
        exception), kept in `exits`. Its JVM is killed first if it outlived it, so that the log
        holds the last of its output."""
        assert self.proc is not None
        self.kill()
        lines = self.this_start().splitlines()
        said = [line for line in lines if line.startswith("error: ")]
        raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]
        stopping = [line for line in lines if line.endswith("; stopping")]  # the lease's reason, if any
        exit_ = {"start": self.starts, "code": self.proc.returncode, **context}
        exit_["error"] = (said or raised or ["?"])[-1][:300]
        if stopping:
            exit_["why"] = stopping[-1][-300:]
        self.exits.append(exit_)
        return exit_

    def kill(self) -> None:
        """SIGKILL the job and its JVM: no goodbye to anyone."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)

    def stop(self, grace: float = 60) -> int | None:
        """SIGTERM, as an orchestrator stops it; SIGKILL after `grace` seconds. Its exit code, or
        None when it had to be killed."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        code = self.proc.poll()
        self.kill()
        return code

    def pids(self) -> tuple[int | None, int | None]:
        """Its Python process and its JVM (the java child pyspark started)."""
        if self.proc is None or self.proc.poll() is not None:
            return None, None
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return self.proc.pid, None
        return self.proc.pid, next((c.pid for c in children if _name(c) == "java"), None)

    def tree(self) -> Tree:
        """Its process tree's CPU time, for reading at two moments."""
        assert self.proc is not None
        return Tree(psutil.Process(self.proc.pid))


def _name(proc: psutil.Process) -> str:
    try:
        return str(proc.name())
    except psutil.Error:
        return ""

"""A Spark standalone cluster on 127.0.0.1: a master and its workers from pyspark's `spark-class`,
for the tests and the benchmarks (a cluster on one machine).

pip's pyspark ships no `start-master.sh`, so the daemons run in the foreground
as our own child processes and are stopped by their PIDs.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from compactor.dev.broker_process import free_ports

BIN = Path(sys.executable).parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class Cluster:
    master_url: str
    worker_dir: Path

    def executor_logs(self) -> list[Path]:
        """Each executor's stderr: `<work-dir>/<app-id>/<executor-id>/stderr`."""
        return sorted(self.worker_dir.glob("app-*/*/stderr"))


def cluster_env() -> dict[str, str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    env.pop("SPARK_HOME", None)  # spark-class finds pyspark's own home
    return env


@contextmanager
def standalone_cluster(base: Path, cores: int = 1, memory: str = "1g", workers: int = 1) -> Iterator[Cluster]:
    """`workers` workers of `cores` cores and `memory` each."""
    port, master_ui, *worker_uis = free_ports(2 + workers, set())
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = cluster_env()
    spark_class = str(BIN / "spark-class")
    master_cmd = [
        spark_class,
        MASTER_CLASS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        str(master_ui),
    ]
    master_url = f"spark://127.0.0.1:{port}"
    worker_dir = base / "work"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with open(logs / "master.log", "wb") as out:
            processes.append(subprocess.Popen(master_cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
        _wait_for(lambda: _master_state(master_ui) is not None, processes, logs / "master.log")
        for n, worker_ui in enumerate(worker_uis):
            worker_cmd = [
                spark_class,
                WORKER_CLASS,
                master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(worker_dir),
                "--webui-port",
                str(worker_ui),
            ]
            log = logs / f"worker-{n}.log"
            with open(log, "wb") as out:
                processes.append(subprocess.Popen(worker_cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
            _wait_for(functools.partial(_have_workers, master_ui, n + 1), processes, log)
        yield Cluster(master_url, worker_dir)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _master_state(ui_port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as response:
            state: dict[str, object] = json.load(response)
            return state
    except OSError:
        return None


def _have_workers(ui_port: int, count: int) -> bool:
    return _alive_workers(ui_port) == count


def _alive_workers(ui_port: int) -> int:
    state = _master_state(ui_port) or {}
    workers = state.get("workers", [])
    listed = workers if isinstance(workers, list) else []
    return sum(1 for w in listed if isinstance(w, dict) and w.get("state") == "ALIVE")


def _wait_for(
    ready: Callable[[], bool], processes: list[subprocess.Popen[bytes]], log: Path, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        dead = [p for p in processes if p.poll() is not None]
        if dead:
            raise RuntimeError(
                f"a cluster daemon exited with {dead[0].returncode}: {log.read_text()[-2000:]}"
            )
        time.sleep(0.5)
    raise TimeoutError(f"the cluster did not come up in {timeout}s: {log.read_text()[-2000:]}")

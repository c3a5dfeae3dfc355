"""The local broker's process: ports, the JVM, liveness checks, and stopping it from its state file."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import time
import uuid
from collections import deque
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from compactor.errors import BrokerStartError

log = logging.getLogger(__name__)

STATE_FILE = "broker.json"
LOG_FILE = "broker.log"
CLUSTER_ID_FILE = "cluster.id"
JAVA_HEAP = "-Xmx512m"
LOG_TAIL_LINES = 20
RUN_MARKER = "=== compactor: starting broker"


def free_ports(count: int, avoid: set[int]) -> list[int]:
    """Ask the OS for `count` distinct free ports on 127.0.0.1.

    The sockets stay open until all are chosen so the ports differ; another
    process may still take one before the JVM binds it (a rare, retryable race).
    """
    sockets: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in avoid:
                ports.append(port)
        return ports
    finally:
        for s in sockets:
            s.close()


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding (Uuid.toString)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka's Uuid.randomUuid() rejects these too
            return text


def failure_report(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The first ERROR lines of the latest start plus the last `lines` lines of broker.log.

    The tail alone is mostly shutdown noise; the cause (a port in use, a bad
    property) is logged first, so both are shown.
    """
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    run = text.rsplit(RUN_MARKER, 1)[-1].splitlines()
    errors = [
        "\n".join(run[i : i + 2])
        for i, line in enumerate(run)
        if " ERROR " in line or " FATAL " in line or line.startswith("Error")
    ][:3]
    tail = "\n".join(deque(run, maxlen=lines))
    first = "first errors:\n" + "\n".join(errors) + "\n" if errors else ""
    return f"{first}end of {path}:\n{tail}"


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise BrokerStartError("`java` is not on PATH (and JAVA_HOME is unset); install Java 17+")
    return found


def cluster_answers(bootstrap: str, timeout: float) -> bool:
    """True if a broker at `bootstrap` returns metadata listing at least one live broker.

    Fenced brokers are left out of metadata, so a non-empty list also means the
    broker has registered with the controller and can lead partitions.
    """
    admin = AdminClient(probe_config(bootstrap))
    try:
        return bool(admin.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return False


def probe_config(bootstrap: str) -> dict[str, str | int | float | bool]:
    # Refused connections are expected while the JVM starts: silence librdkafka's
    # stderr and keep its reconnect backoff short so readiness is seen promptly.
    return {
        "bootstrap.servers": bootstrap,
        "log_level": 0,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 500,
    }


def is_broker_process(pid: int, properties: Path) -> bool:
    """True if `pid` is alive and is the broker started with `properties`.

    Checks the command line (on Linux) so a recycled pid is never signalled;
    zombies have an empty command line and so count as gone.
    """
    cmdline = Path(f"/proc/{pid}/cmdline")
    if Path("/proc/self").exists():
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            return False
        return b"kafka.Kafka" in args and str(properties).encode() in args
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(data_dir: Path) -> dict[str, object] | None:
    try:
        state = json.loads((Path(data_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def reap(pid: int) -> None:
    """Collect `pid` if it is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_from_dir(data_dir: Path, timeout: float = 30) -> bool:
    """Stop the broker recorded in `data_dir/broker.json` by another process.

    Returns True if a running broker was stopped, False if none was running.
    SIGTERM first, SIGKILL after `timeout` seconds, like `LocalKafkaBroker.stop`.
    """
    data_dir = Path(data_dir).resolve()
    state = read_state(data_dir)
    if state is None:
        return False
    pid = state.get("pid")
    properties = Path(str(state.get("properties", data_dir / "server.properties")))
    stopped = False
    if isinstance(pid, int) and is_broker_process(pid, properties):
        log.info("Stopping Kafka broker pid %d from %s", pid, data_dir)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while is_broker_process(pid, properties) and time.monotonic() < deadline:
            reap(pid)
            time.sleep(0.1)
        if is_broker_process(pid, properties):
            log.warning("Kafka broker pid %d ignored SIGTERM for %ss; killing", pid, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while is_broker_process(pid, properties) and time.monotonic() < deadline:
                reap(pid)
                time.sleep(0.05)
        reap(pid)
        stopped = True
    (data_dir / STATE_FILE).unlink(missing_ok=True)
    return stopped


def running_bootstrap(data_dir: Path, timeout: float = 5) -> str | None:
    """The bootstrap of the broker recorded in `data_dir`, if it is alive and answers."""
    data_dir = Path(data_dir).resolve()
    state = read_state(data_dir)
    if state is None:
        return None
    pid, bootstrap = state.get("pid"), state.get("bootstrap")
    properties = Path(str(state.get("properties", data_dir / "server.properties")))
    if not isinstance(pid, int) or not isinstance(bootstrap, str):
        return None
    if not is_broker_process(pid, properties):
        return None
    return bootstrap if cluster_answers(bootstrap, timeout) else None

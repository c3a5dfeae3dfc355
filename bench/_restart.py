"""startup.py's restart figures: `compactor run` processes, timed from spawn to an event processed.

Three starts of one job on one warehouse (1,000 segments in its catalog), each with a new
real load event waiting on the topic:
- cold: a new checkpoint, nobody in the lease's group;
- restart after SIGKILL: the same host and checkpoint, so the same seat, the same static name
  in the group: the dead process's shard is handed over at once;
- restart elsewhere: the same, but with the host's seat held by someone else (as a restart on
  another host, or before static membership): the job joins as a newcomer and waits for the
  dead process's session to end.
Each is split at the job's own lines: lease held and Spark up (`spark: master`), recovery done
and the query started (`compactor running`), and the first event's work done (the
`compactor_events_total` metric).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import run_args

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from compactor.kafka.settings import KafkaSettings

COMPACTOR = str(Path(sys.executable).with_name("compactor"))
MARKS = {"spark": "spark: master", "layout": "compactor running", "started": "shard 0: running"}
TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TimedJob:
    """`compactor run` with the time each of its marks appeared, counted from the spawn."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.marks: dict[str, float] = {}
        self.spawned = time.monotonic()
        self.process = subprocess.Popen(
            [COMPACTOR, "run", *args, "--metrics-port", str(self.port), "--metrics-host", "127.0.0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with open(self.log, "a") as out:
            for line in self.process.stdout:
                out.write(line)
                for mark, text in MARKS.items():
                    if text in line and mark not in self.marks:
                        self.marks[mark] = time.monotonic() - self.spawned

    def metric(self, prefix: str) -> dict[str, float]:
        """Each sample whose line starts with `prefix`, by its labels."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as page:
                text = page.read().decode()
        except OSError:
            return {}
        samples = (x.rsplit(" ", 1) for x in text.splitlines() if x.startswith(prefix))
        return {name.removeprefix(prefix): float(value) for name, value in samples}

    def events(self) -> float:
        return sum(self.metric("compactor_events_total").values())

    def batch_phases(self) -> dict[str, float]:
        """Seconds the batches so far spent in each phase (one batch: the first event's)."""
        sums = self.metric("compactor_batch_phase_seconds_sum")
        found = {k.split('phase="')[1].split('"')[0]: v for k, v in sums.items() if 'phase="' in k}
        return found | {"batch": sum(self.metric("compactor_batch_duration_seconds_sum").values())}

    def until_processed(self) -> dict[str, Any]:
        """Spawn -> each mark, and -> the first event's work done."""
        while self.events() < 1:
            if self.process.poll() is not None:
                raise RuntimeError(f"the job exited with {self.process.returncode}: see {self.log}")
            if time.monotonic() - self.spawned > TIMEOUT_S:
                raise RuntimeError(f"no event processed in {TIMEOUT_S:.0f}s: see {self.log}")
            time.sleep(0.1)
        return self.marks | {"processed": time.monotonic() - self.spawned, "phases": self.batch_phases()}

    def kill(self) -> None:
        """SIGKILL the job and its Spark: no goodbye to anyone."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def send_load(spark: SparkSession, kafka: KafkaSettings, warehouse: str, n: int, start: datetime) -> None:
    """A new real segment of the warehouse's real table (loaded at `start`, its range `n` hours
    before), and its completion event."""
    from compactor.client.loader import sample_rows
    from compactor.codec.events import default_codec
    from compactor.delta.table_ops.writes import write_segment
    from compactor.domain.events import SegmentCompleted
    from compactor.domain.segments import Segment, TimeRange
    from compactor.kafka.producer import EventProducer

    end = start - timedelta(hours=n)
    load = Segment(f"restart-{n}", "t0000", TimeRange(end - timedelta(hours=1), end), start)
    load = write_segment(spark, warehouse, load, sample_rows(spark, end - timedelta(hours=1), end, 10))
    value = default_codec().encode_segment_completed(SegmentCompleted(load, load.loaded_at))
    producer = EventProducer(kafka)
    producer.send_all([(kafka.segments_topic, load.table, value, None)])
    producer.close()


def restart_figures(
    spark: SparkSession, root: Path, bootstrap: str, warehouse: str, config: Path, loaded_at: datetime
) -> list[dict[str, Any]]:
    """Cold start, restart after SIGKILL, and restart as a newcomer, for one job."""
    from compactor.delta.paths import warehouse_uri
    from compactor.kafka.lease import lease_group
    from compactor.kafka.seat import take_seat
    from compactor.kafka.settings import KafkaSettings

    prefix = f"restart-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSettings(bootstrap, f"{prefix}-segments", f"{prefix}-results", f"{prefix}-dead")
    checkpoint = root / "restart-checkpoint"
    args = run_args(config, warehouse, checkpoint, kafka)
    rows: list[dict[str, Any]] = []
    for n, start in enumerate(("cold start", "restart after SIGKILL", "restart as a newcomer")):
        send_load(spark, kafka, warehouse, n + 1, loaded_at)
        seat = None
        if start == "restart as a newcomer":  # the host's seat is someone else's: a new static name
            seat = take_seat(
                f"{lease_group(kafka, warehouse_uri(warehouse))}\n{warehouse_uri(str(checkpoint))}"
            )
        job = TimedJob(args, root / "restart-jobs.log")
        try:
            rows.append({"start": start} | job.until_processed())
            time.sleep(3)  # the batch's offsets committed: the next start reads only the new event
        finally:
            job.kill()
            if seat is not None:
                seat.release()
    shutil.rmtree(checkpoint, ignore_errors=True)
    return rows

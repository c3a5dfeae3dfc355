"""The real job as a separate process (killed, restarted), and segments a producer writes itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from compactor.client.loader import sample_rows
from compactor.codec.events import default_codec
from compactor.delta.paths import table_uri
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.stream.faults import FAULT_ENV

TABLE = "ledger"
COMPACTOR = str(Path(sys.executable).parent / "compactor")


def run_job(args: list[str], fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run(
        [COMPACTOR, "run", *args, "--until-idle"], env=env, capture_output=True, text=True, timeout=600
    )


def bulk_load(
    spark: Any, warehouse: Path | str, kafka: KafkaSettings, days: int, rows: int, first_day: int = 0,
    table: str = TABLE,
) -> list[Segment]:  # fmt: skip
    """Daily segments (`d<first_day>` on) written as a producer that writes Delta itself would:
    one append for all of them (the rows carry their segment id), then one event each."""
    first = datetime(2024, 1, 1, tzinfo=UTC)
    frames = [
        sample_rows(spark, first + timedelta(days=d), first + timedelta(days=d + 1), rows, seed=d).withColumn(
            "segment_id", F.lit(f"d{d:02d}")
        )
        for d in range(first_day, first_day + days)
    ]
    data = frames[0]
    for frame in frames[1:]:
        data = data.unionByName(frame)
    data.write.format("delta").mode("append").partitionBy("segment_id").save(table_uri(warehouse, table))
    segments = [
        Segment(
            f"d{d:02d}",
            table,
            TimeRange(first + timedelta(days=d), first + timedelta(days=d + 1)),
            loaded_at=now_utc(),
            records=rows,
        )
        for d in range(first_day, first_day + days)
    ]
    codec = default_codec()
    EventProducer(kafka).send_all(
        [
            (
                kafka.segments_topic,
                table,
                codec.encode_segment_completed(SegmentCompleted(s, now_utc())),
                None,
            )
            for s in segments
        ]
    )
    return segments


def wait_while_running(
    check: Callable[[], bool], process: subprocess.Popen[str], log: Path, what: str,
    timeout: float = 180, every: float = 1.0,
) -> None:  # fmt: skip
    """Poll `check` until it holds; fail at once, with the log's tail, if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if process.poll() is not None:
            pytest.fail(
                f"the process exited with {process.returncode} before {what}: {log.read_text()[-3000:]}"
            )
        time.sleep(every)
    pytest.fail(f"no {what} within {timeout}s: {log.read_text()[-3000:]}")


def start_job(
    config: Path, warehouse: Path, checkpoint: Path, bootstrap: str, kafka: Any, port: int, *extra: str
) -> Any:
    """The job, its output in a file (a pipe nobody reads would fill and block it)."""
    log = checkpoint.parent / f"job-{time.monotonic_ns()}.log"
    with open(log, "w") as out:
        job = subprocess.Popen(
            [
                COMPACTOR, "run", "--config", str(config), "--warehouse", str(warehouse),
                "--checkpoint", str(checkpoint), "--bootstrap-servers", bootstrap,
                "--segments-topic", kafka.segments_topic, "--results-topic", kafka.results_topic,
                "--dead-letter-topic", kafka.dead_letter_topic,
                "--metrics-port", str(port), "--metrics-host", "127.0.0.1", *extra,
            ],
            stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    job.log = log
    return job


def stop(job: Any) -> str:
    """SIGTERM, as an orchestrator stops the job; its output (a kill if it does not stop in 2 minutes)."""
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
    try:
        job.wait(timeout=120)
        return str(job.log.read_text())
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        return str(job.log.read_text()) + "\n(killed: SIGTERM did not stop it)"

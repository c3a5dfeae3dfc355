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

import shutil
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.job_process import JobProcess, run_args

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from compactor.kafka.settings import KafkaSettings

MARKS = {"spark": "spark: master", "layout": "compactor running", "started": "shard 0: running"}
TIMEOUT_S = 300.0


def until_processed(job: JobProcess) -> dict[str, Any]:
    """Spawn -> each of the job's marks, and -> the first event's work done (its
    `compactor_events_total`), with the seconds its batches spent in each phase."""
    while job.metric("compactor_events_total") < 1:
        if not job.alive():
            raise RuntimeError(
                f"the job exited with {job.proc and job.proc.returncode}; its log ends:\n{job.log_end(12)}"
            )
        if time.monotonic() - job.started_at > TIMEOUT_S:
            raise RuntimeError(f"no event processed in {TIMEOUT_S:.0f}s; its log ends:\n{job.log_end(12)}")
        time.sleep(0.1)
    processed = time.monotonic() - job.started_at
    return job.marks_at | {"processed": processed, "phases": batch_phases(job.metrics())}


def batch_phases(metrics: dict[str, float]) -> dict[str, float]:
    """Seconds the batches so far spent in each phase, and in all."""
    phases = {
        k.split('phase="')[1].split('"')[0]: v
        for k, v in metrics.items()
        if k.startswith("compactor_batch_phase_seconds_sum{") and 'phase="' in k
    }
    total = sum(v for k, v in metrics.items() if k.split("{")[0] == "compactor_batch_duration_seconds_sum")
    return phases | {"batch": total}


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
    spark: SparkSession,
    root: Path,
    bootstrap: str,
    warehouse: str,
    config: Path,
    loaded_at: datetime,
    env: Mapping[str, str] | None = None,
    kills: int = 1,
) -> list[dict[str, Any]]:
    """Cold start, `kills` restarts after SIGKILL (a start varies by a second or more from one to
    the next on a small machine: judge their median), and a restart as a newcomer, for one job
    (`env`: its environment, else this process's)."""
    from compactor.delta.paths import warehouse_uri
    from compactor.kafka.lease import lease_group
    from compactor.kafka.seat import take_seat
    from compactor.kafka.settings import KafkaSettings

    prefix = f"restart-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSettings(bootstrap, f"{prefix}-segments", f"{prefix}-results", f"{prefix}-dead")
    checkpoint = root / "restart-checkpoint"
    args = run_args(config, warehouse, checkpoint, kafka)
    rows: list[dict[str, Any]] = []
    starts = ["cold start", *["restart after SIGKILL"] * kills, "restart as a newcomer"]
    for n, start in enumerate(starts):
        send_load(spark, kafka, warehouse, n + 1, loaded_at)
        seat = None
        if start == "restart as a newcomer":  # the host's seat is someone else's: a new static name
            seat = take_seat(
                f"{lease_group(kafka, warehouse_uri(warehouse))}\n{warehouse_uri(str(checkpoint))}"
            )
        job = JobProcess(args, root / "restart-jobs.log", env=env, marks=MARKS).start()
        try:
            rows.append({"start": start} | until_processed(job))
            time.sleep(3)  # the batch's offsets committed: the next start reads only the new event
        finally:
            job.kill()
            if seat is not None:
                seat.release()
    shutil.rmtree(checkpoint, ignore_errors=True)
    return rows

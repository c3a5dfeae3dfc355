"""Bounded soak: a steady stream of loads and bad events, a job killed with SIGKILL at
intervals and restarted on its checkpoint, then a drain and a conservation check.

Prints events processed, merges committed, conflicts retried, dead letters and the
consumer lag at the end; saves bench/results/soak.json. Run:
    .venv/bin/python bench/soak.py [--minutes 10] [--kill-every 45] [--quick]
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.client.loader import load_segment, sample_rows
from compactor.delta.paths import table_uri
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from compactor.spark.session import build_spark
from harness.job_process import COMPACTOR, JobProcess, run_args
from harness.report import bench_parser, save_results
from harness.services import kafka_bootstrap

CONFIG = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [day, week]\n"


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-probe"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def checkpoint_offset(checkpoint: Path, topic: str) -> int:
    """The offset the job's checkpoint has reached on partition 0 of `topic`."""
    committed = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    if not committed:
        return 0
    lines = (checkpoint / "offsets" / committed[-1].name).read_text().splitlines()
    return int(json.loads(lines[-1])[topic]["0"])


def main() -> None:
    parser = bench_parser(__doc__, "one minute")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=45.0, help="seconds between SIGKILLs of the job")
    args = parser.parse_args()
    minutes = 1.0 if args.quick else args.minutes
    work = Path(tempfile.mkdtemp(prefix="compactor-soak-"))
    with kafka_bootstrap(work) as bootstrap:
        figures = soak(work, bootstrap, minutes, args.kill_every)
    for key, value in figures.items():
        print(f"{key:<22} {value}")
    save_results("soak", args.quick, {"figures": figures})
    if not figures["rows_conserved"] or figures["dead_letters"] != figures["bad_events"]:
        print(f"FAILED: the job's log and the warehouse are kept in {work}")
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)  # kept when the run fails or raises, for its log


def soak(work: Path, bootstrap: str, minutes: float, kill_every: float) -> dict[str, Any]:
    kafka = KafkaSettings(bootstrap, "soak.segments", "soak.results", "soak.dead")
    ensure_topics(kafka, [kafka.segments_topic, kafka.results_topic, kafka.dead_letter_topic])
    spark = build_spark("compactor-soak", master="local[1]")
    spark.sparkContext.setLogLevel("ERROR")
    warehouse, checkpoint = work / "warehouse", work / "checkpoint"
    (work / "tables.yaml").write_text(CONFIG)
    job_args = run_args(work / "tables.yaml", warehouse, checkpoint, kafka)
    job = JobProcess(job_args, work / "job.log").start()
    producer, rng = EventProducer(kafka), random.Random(11)
    loaded_rows = loads = bad = kills = 0
    started = last_kill = time.monotonic()
    hour = datetime(2024, 1, 1, tzinfo=UTC)
    try:
        while time.monotonic() - started < minutes * 60:
            rows = sample_rows(spark, hour, hour + timedelta(hours=1), 20, seed=loads)
            load_segment(
                spark,
                warehouse,
                kafka,
                producer,
                "soak",
                rows,
                hour,
                hour + timedelta(hours=1),
                segment_id=f"h{loads:05d}",
            )
            loads, loaded_rows, hour = loads + 1, loaded_rows + 20, hour + timedelta(hours=1)
            junk = [(kafka.segments_topic, "soak", rng.randbytes(16), None) for _ in range(20)]
            producer.send_all(junk)
            bad += len(junk)
            if time.monotonic() - last_kill > kill_every:
                job.kill()
                kills, last_kill = kills + 1, time.monotonic()
                job.start()
    finally:
        job.kill()
    with job.log.open("a") as log:
        drained = subprocess.run(
            [COMPACTOR, "run", *job_args, "--until-idle"], stdout=log, stderr=subprocess.STDOUT, check=False
        )
    table = spark.read.format("delta").load(table_uri(warehouse, "soak"))
    rows_now = table.count()
    history = DeltaTable.forPath(spark, table_uri(warehouse, "soak")).history().collect()
    merges = sum(1 for r in history if r.userMetadata and '"op":"merge"' in r.userMetadata)
    text = job.log.read_text()
    figures = {
        "minutes": minutes,
        "loads": loads,
        "events_produced": loads + bad + merges,
        "bad_events": bad,
        "kills": kills,
        "merges_committed": merges,
        "conflicts_retried": text.count("Delta conflict, retry"),
        "dead_letters": end_offset(bootstrap, kafka.dead_letter_topic),
        "consumer_lag_at_end": end_offset(bootstrap, kafka.segments_topic)
        - checkpoint_offset(checkpoint, kafka.segments_topic),
        "rows_loaded": loaded_rows,
        "rows_in_table": rows_now,
        "rows_conserved": rows_now == loaded_rows
        and table.select(F.col("segment_id")).count() == loaded_rows,
        "drain_exit_code": drained.returncode,
    }
    spark.stop()
    return figures


if __name__ == "__main__":
    main()

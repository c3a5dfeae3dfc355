"""capacity.py's two-job drain: the same backlog drained by two jobs of one core each, sharing
the warehouse in two shards, against one job of two cores.

Each job is a process of its own with its own Spark (`local[1]`), running one shard (a fixed
assignment: the group protocol that hands shards out is not what is measured) with its own
checkpoint; the events are on a two-partition topic before either starts. The two-job figure
is every merge over the time from the first query's start to the last table's merge."""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.loads import bench_topics

if TYPE_CHECKING:
    from compactor.config.tables import ProjectConfig
    from compactor.job.query import Shard
    from compactor.kafka.settings import KafkaSettings

SHARDS = 2


def shard_setup(config: ProjectConfig, kafka: KafkaSettings, warehouse: Path, shard: int) -> Shard:
    """Shard `shard` of two as a job runs it (its part of the catalog, its partitions, its checkpoint)."""
    from compactor.delta.warehouse.shard_record import ShardRecord
    from compactor.job.spark_shard import shard_of_job
    from compactor.job.wiring import job_slots
    from compactor.kafka.shards import ShardLayout
    from compactor.stream.merging.workers import thread_workers

    layout = ShardLayout(kafka.segments_topic, SHARDS, SHARDS)
    slots = job_slots(config)
    record = ShardRecord(SHARDS, SHARDS)
    return shard_of_job(
        layout, record, shard, warehouse.parent / "checkpoint", slots, thread_workers(slots.limit)
    )


def shard_tables(tables: set[str], shard: int) -> set[str]:
    from compactor.kafka.partitioning import shard_of

    return {t for t in tables if shard_of(t, SHARDS, SHARDS) == shard}


def two_job_drain(
    work: Path,
    bootstrap: str,
    level: int,
    concurrency: int,
    run_worker: Callable[..., dict[str, Any]],
    events: list[list[str]],
) -> dict[str, Any]:
    """Both jobs started together on one copy of the backlog; their results combined."""
    from compactor.kafka.producer import EventProducer

    run = work / "drain-two-jobs"
    shutil.copytree(work / "template", run / "warehouse")
    prefix = f"cap-{uuid.uuid4().hex[:8]}"
    kafka = bench_topics(bootstrap, prefix, shards=SHARDS)
    producer = EventProducer(kafka)  # keyed by table, Kafka's partitioner: each table in its shard
    producer.send_all([(kafka.segments_topic, t, bytes.fromhex(v), None) for t, v in events])
    producer.close()
    results: dict[int, dict[str, Any]] = {}

    def one(shard: int) -> None:
        results[shard] = run_worker(
            "drain",
            run / f"result-{shard}.json",
            bootstrap=bootstrap,
            prefix=prefix,
            warehouse=run / "warehouse",
            segments_file=work / "drain-events.json",
            concurrency=concurrency,
            level=level,
            timeout=7200,
            master="local[1]",
            shard=shard,
            produced=1,
        )

    try:
        threads = [threading.Thread(target=one, args=(shard,)) for shard in range(SHARDS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        shutil.rmtree(run / "warehouse", ignore_errors=True)
    if len(results) != SHARDS:
        raise RuntimeError("a job of the two-job drain failed (see its log)")
    jobs = [results[s] for s in range(SHARDS)]
    seconds = max(j["ended_at"] for j in jobs) - min(j["started_at"] for j in jobs)
    merges = sum(j["merges"] for j in jobs)
    segments = sum(j["segments"] for j in jobs)
    cpu = sum(j["cpu_seconds"] for j in jobs)
    return {
        "concurrency": concurrency,
        "master": f"{SHARDS} jobs x local[1]",
        "tables": sum(j["tables"] for j in jobs),
        "segments": segments,
        "merges": merges,
        "failed": sum(j["failed"] for j in jobs),
        "recovery_seconds": max(j["recovery_seconds"] for j in jobs),
        "seconds": seconds,
        "merges_per_s": merges / seconds,
        "segments_per_s": segments / seconds,
        "cpu_seconds": cpu,
        "cpu_seconds_per_merge": cpu / merges,
        "peak_rss_mib": sum(j["peak_rss_mib"] for j in jobs),
        "phases": {p: sum(j["phases"][p] for j in jobs) for p in jobs[0]["phases"]},
        "batches": sum(j["batches"] for j in jobs),
        "jobs": jobs,
    }

"""Capacity on the real components: merges of several tables side by side (their Spark jobs
overlap, seen in Spark's own event log), pools that keep small merges moving beside a large
one, each table's results in commit order, a kill with merges in flight, and merges that
come due with time and schedules, across a restart."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from compactor.cli.dry_run import run_plan
from compactor.client.loader import load_segment, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.domain.clock import now_utc
from compactor.domain.segments import Segment
from compactor.job.query import start_query
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.stream.faults import WITH_MERGES_IN_FLIGHT
from tests.helpers.jobs import run_job
from tests.helpers.streaming import checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

HOUR = timedelta(hours=1)
T0 = datetime(2024, 3, 4, tzinfo=UTC)


def load_hours(
    spark: Any, warehouse: Path, kafka: KafkaSettings, table: str, hours: list[int], rows: int
) -> list[Segment]:
    producer = EventProducer(kafka)
    try:
        return [
            load_segment(
                spark, warehouse, kafka, producer, table,
                sample_rows(spark, T0 + h * HOUR, T0 + (h + 1) * HOUR, rows, seed=h),
                T0 + h * HOUR, T0 + (h + 1) * HOUR, segment_id=f"{table}-h{h:02d}",
            )
            for h in hours
        ]  # fmt: skip
    finally:
        producer.close()


def job_args(
    config: Path, warehouse: Path, checkpoint: Path, bootstrap: str, kafka: KafkaSettings
) -> list[str]:
    return [
        "--config", str(config), "--warehouse", str(warehouse), "--checkpoint", str(checkpoint),
        "--bootstrap-servers", bootstrap, "--segments-topic", kafka.segments_topic,
        "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
    ]  # fmt: skip


def results(bootstrap: str, kafka: KafkaSettings) -> list[dict[str, Any]]:
    return [
        default_codec().decode_merge_result(m.value()) for m in consume_all(bootstrap, kafka.results_topic)
    ]


def spark_jobs(event_log_dir: Path) -> list[dict[str, Any]]:
    """Each Spark job of the run, from Spark's event log: its merge label, pool, start and end."""
    lines = [line for p in sorted(event_log_dir.rglob("events_*")) for line in p.read_text().splitlines()]
    assert lines, f"no event log under {event_log_dir}"
    started: dict[int, dict[str, Any]] = {}
    for line in lines:
        event = json.loads(line)
        if event["Event"] == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            started[event["Job ID"]] = {
                "label": props.get("spark.job.description") or "",
                "pool": props.get("spark.scheduler.pool"),
                "start": event["Submission Time"],
            }
        elif event["Event"] == "SparkListenerJobEnd" and event["Job ID"] in started:
            started[event["Job ID"]]["end"] = event["Completion Time"]
    return [j for j in started.values() if "end" in j and j["label"].startswith("compactor merge ")]


def commit_times(spark: Any, warehouse: Path, table: str) -> dict[str, int]:
    """Plan id -> when its merge committed (epoch ms), from the table's history."""
    history = DeltaTable.forPath(spark, table_uri(warehouse, table)).history().collect()
    found = {}
    for row in history:
        meta = json.loads(row.userMetadata) if row.userMetadata and row.userMetadata.startswith("{") else {}
        if meta.get("op") == "merge":
            found[meta["plan_id"]] = int(row.timestamp.timestamp() * 1000)
    return found


POOLS_YAML = """
defaults:
  rules:
    - rule: bin_pack
      pools:
        # small loads, packed two hours at a time; as many at once as slots are free
        - {name: small, max_age: 3650d, max_size: 1MB, max_width: 2h, scale_profile: "I"}
        # large ones: one merge at a time
        - {name: large, max_age: 3650d, max_size: 4GB, max_width: 2h, scale_profile: "III"}
operations:
  max_concurrent_merges: 4
  # every merge written by Spark: these tests watch the merges' Spark jobs in their pools
  driver_merge_max_bytes: 0
"""


def test_tables_merge_side_by_side_a_large_merge_holds_no_small_one_and_results_follow_commits(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    big = load_hours(spark, warehouse, kafka, "big", [0, 1], rows=1_500_000)
    smalls = {t: load_hours(spark, warehouse, kafka, t, [0, 1, 5, 6], rows=20) for t in ("s1", "s2", "s3")}
    assert all(s.bytes > 1 << 20 for s in big) and all(s.bytes < 1 << 20 for v in smalls.values() for s in v)
    before = {t: checksum(spark.read.format("delta").load(table_uri(warehouse, t))) for t in ["big", *smalls]}
    config = tmp_path / "tables.yaml"
    config.write_text(POOLS_YAML)
    events = tmp_path / "events"
    events.mkdir()
    args = job_args(config, warehouse, tmp_path / "cp", kafka_bootstrap, kafka)
    done = run_job(
        [
            *args,
            "--conf",
            "spark.eventLog.enabled=true",
            "--conf",
            "spark.eventLog.compress=false",
            "--conf",
            f"spark.eventLog.dir={events.as_uri()}",
        ],
        None,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    announced = results(kafka_bootstrap, kafka)
    assert Counter(r["table"] for r in announced) == {"big": 1, "s1": 2, "s2": 2, "s3": 2}
    assert all(r["status"].value == "SUCCEEDED" for r in announced)
    for table, rows in before.items():
        assert checksum(spark.read.format("delta").load(table_uri(warehouse, table))) == rows
    # each table's results follow its commits (two merges of one small table ran side by side)
    for table in smalls:
        versions = [r["table_version"] for r in announced if r["table"] == table]
        assert versions == sorted(versions)

    jobs = spark_jobs(events)
    by_table: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        by_table.setdefault(job["label"].split()[2], []).append(job)
    assert set(by_table) == {"big", "s1", "s2", "s3"}
    assert {j["pool"] for j in by_table["big"]} == {"large"}
    assert {j["pool"] for t in smalls for j in by_table[t]} == {"small"}
    # Spark jobs of different tables ran at the same time
    overlapping = {
        frozenset((a["label"].split()[2], b["label"].split()[2]))
        for a in jobs
        for b in jobs
        if a["label"].split()[2] != b["label"].split()[2] and a["start"] < b["end"] and b["start"] < a["end"]
    }
    assert len(overlapping) >= 2, overlapping
    # the large merge was running when small merges committed
    big_start = min(j["start"] for j in by_table["big"])
    big_commit = max(commit_times(spark, warehouse, "big").values())
    small_commits = [t for table in smalls for t in commit_times(spark, warehouse, table).values()]
    assert any(big_start < t < big_commit for t in small_commits), (big_start, big_commit, small_commits)


MINOR_YAML = """
defaults:
  rules:
    - rule: minor
      level_thresholds: [2, 0]
operations:
  max_concurrent_merges: 4
"""


def test_a_kill_with_merges_in_flight_ends_as_a_clean_run_would(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    tables = ("a", "b", "c", "d")
    loaded = {t: load_hours(spark, warehouse, kafka, t, [0, 1, 2, 3], rows=5) for t in tables}
    before = {t: checksum(spark.read.format("delta").load(table_uri(warehouse, t))) for t in tables}
    config = tmp_path / "tables.yaml"
    config.write_text(MINOR_YAML)
    args = job_args(config, warehouse, tmp_path / "cp", kafka_bootstrap, kafka)

    crashed = run_job(args, fault=WITH_MERGES_IN_FLIGHT)
    assert crashed.returncode == -9, f"the job should have been killed: {crashed.stderr[-2000:]}"
    recovered = run_job(args, fault=None)
    assert recovered.returncode == 0, recovered.stderr[-3000:]

    rules = load_config({"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 0]}]}})
    announced = results(kafka_bootstrap, kafka)
    assert all(r["status"].value == "SUCCEEDED" for r in announced)
    for table in tables:
        expected = run_plan(rules, loaded[table], simulate=True)
        df = spark.read.format("delta").load(table_uri(warehouse, table))
        assert checksum(df) == before[table], f"{table}: no row lost or doubled"
        ids = {r.segment_id for r in df.select("segment_id").distinct().collect()}
        assert ids == {s["id"] for s in expected["segments"]}, f"{table}: the layout of a clean run"
        committed = commit_times(spark, warehouse, table)
        history = DeltaTable.forPath(spark, table_uri(warehouse, table)).history().collect()
        merges = [r for r in history if r.userMetadata and '"op":"merge"' in r.userMetadata]
        assert len(merges) == len(committed) == len(expected["merges"]) == 2, f"{table}: one commit per plan"
        mine = Counter(r["plan_id"] for r in announced if r["table"] == table)
        assert mine == dict.fromkeys(committed, 1), f"{table}: one MergeResult per plan"


def test_merges_come_due_with_time_and_schedules_without_events_across_a_restart(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """`aging`: nothing fits `fresh` (1 byte), so its loads wait for `settled`, 20 s after
    their data ends; the job restarts in between. `nightly`: a manual major rule on a
    schedule of every 5 seconds. No event arrives after the loads."""
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    settle = 20
    config = load_config(
        {
            "tables": {
                "aging": {
                    "rules": [
                        {
                            "rule": "bin_pack",
                            "pools": [
                                {"name": "fresh", "max_age": f"{settle}s", "max_size": 1, "max_width": "1h"},
                                {
                                    "name": "settled",
                                    "min_age": f"{settle}s",
                                    "max_age": "3650d",
                                    "max_size": "1GB",
                                    "max_width": "1h",
                                },
                            ],
                        }
                    ]
                },
                "nightly": {"rules": [{"rule": "major", "trigger": "manual", "schedule": "* * * * * */5"}]},
            }
        }
    )
    producer = EventProducer(kafka)
    now = now_utc().replace(microsecond=0)
    aging = [
        load_segment(spark, warehouse, kafka, producer, "aging", sample_rows(spark, now - (i + 1) * timedelta(minutes=5),
                     now - i * timedelta(minutes=5), 5), now - (i + 1) * timedelta(minutes=5), now - i * timedelta(minutes=5),
                     segment_id=f"aging-{i}")
        for i in range(2)
    ]  # fmt: skip
    load_hours(spark, warehouse, kafka, "nightly", [0, 1, 2], rows=5)
    producer.close()
    checkpoint = tmp_path / "cp"

    first = build_handler(spark, config, warehouse, kafka)
    query = start_query(spark, first, kafka, checkpoint, trigger_interval="500 milliseconds")
    try:
        wait(lambda: first.stats.events >= 5, "the loads admitted")
        wait(
            lambda: any(r["table"] == "nightly" for r in results(kafka_bootstrap, kafka)),
            "the schedule fired",
        )
        assert not any(r["table"] == "aging" for r in results(kafka_bootstrap, kafka)), (
            "too early for `settled`"
        )
    finally:
        query.stop()
        first.drain(30)
    due = first.planner.due.get("aging")
    assert due is not None and due.at == max(s.end for s in aging) + timedelta(seconds=settle)

    restarted = build_handler(spark, config, warehouse, kafka)
    query = start_query(spark, restarted, kafka, checkpoint, trigger_interval="500 milliseconds")
    try:
        wait(
            lambda: any(r["table"] == "aging" for r in results(kafka_bootstrap, kafka)), "the aged merge", 90
        )
    finally:
        query.stop()
        restarted.drain(30)
    merged = [r for r in results(kafka_bootstrap, kafka) if r["table"] == "aging"]
    assert len(merged) == 1 and merged[0]["status"].value == "SUCCEEDED"
    assert merged[0]["produced_at"] >= due.at, "not before the pool's age"
    assert restarted.stats.due_attempts >= 1
    nightly = [r for r in results(kafka_bootstrap, kafka) if r["table"] == "nightly"]
    assert [r["rule"] for r in nightly] == ["major"] and nightly[0]["status"].value == "SUCCEEDED"


def wait(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.5)

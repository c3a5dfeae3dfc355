"""Several jobs sharing one warehouse in shards, as real processes on a real broker, Spark and
Delta: the shards split between them, a SIGKILLed job's shards taken over, a restarted and a
third job taking some back without stopping the survivor's other queries, every table merged
exactly as `compactor plan --simulate` predicts, each plan committed and announced once."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.spark_store import SparkTableStore
from compactor.domain.events import MergeStatus
from compactor.kafka.lease import SESSION_TIMEOUT_MS, group_owners, lease_group
from compactor.kafka.shards import ShardLayout
from compactor.rules.simulation import Simulation
from tests.helpers.jobs import COMPACTOR, bulk_load
from tests.helpers.streaming import consume_all, make_kafka

pytestmark = pytest.mark.integration

SHARDS, PARTITIONS = 4, 8
CONFIG = f"""
operations:
  shards: {SHARDS}
  max_concurrent_merges: 2
defaults:
  rules:
    - rule: auto_merge
      levels: [week]
"""


def tables_one_per_shard(layout: ShardLayout) -> list[str]:
    """Four table names, one in each shard (so every job, whichever shards it holds, has work)."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < layout.shards:
        name, n = f"t{n}", n + 1
        found.setdefault(layout.shard_of(name), name)
    return sorted(found.values())


class Job:
    """`compactor run` as a process, its output in a file."""

    def __init__(self, name: str, args: list[str], workdir: Path) -> None:
        self.log = workdir / f"{name}.log"
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [COMPACTOR, "run", *args], stdout=out, stderr=subprocess.STDOUT, text=True
            )

    def output(self) -> str:
        return self.log.read_text()

    def running(self) -> list[int]:
        """Shards this job started, in order (a shard started twice shows twice)."""
        return [int(s) for s in re.findall(r"shard (\d+): running", self.output())]

    def handed_on(self) -> list[int]:
        return [int(s) for s in re.findall(r"shard (\d+): stopped and handed on", self.output())]

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.output()


def until(check: Callable[[], bool], jobs: list[Job], what: str, timeout: float = 150) -> float:
    """Seconds until `check` holds; fails with the jobs' output if a job exits or time runs out."""
    started = time.monotonic()
    while not check():
        for job in jobs:
            if job.process.poll() is not None:
                pytest.fail(
                    f"{job.log.name} exited with {job.process.returncode} before {what}:\n{job.output()[-4000:]}"
                )
        if time.monotonic() - started > timeout:
            pytest.fail(f"no {what} in {timeout}s:\n" + "\n".join(j.output()[-2500:] for j in jobs))
        time.sleep(0.5)
    return time.monotonic() - started


def test_jobs_share_shards_take_over_a_killed_ones_and_merge_every_table_once(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique, partitions=PARTITIONS)
    layout = ShardLayout(kafka.segments_topic, SHARDS, PARTITIONS)
    tables = tables_one_per_shard(layout)
    config_path = tmp_path / "tables.yaml"
    config_path.write_text(CONFIG)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "cp"
    args = [
        "--config", str(config_path), "--warehouse", str(warehouse), "--checkpoint", str(checkpoint),
        "--bootstrap-servers", kafka_bootstrap, "--segments-topic", kafka.segments_topic,
        "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
    ]  # fmt: skip
    group = lease_group(kafka, str(warehouse.resolve()), SHARDS)
    loaded = [s for t in tables for s in bulk_load(spark, warehouse, kafka, 7, 40, 0, t)]

    def results() -> list[dict[str, Any]]:
        return [
            default_codec().decode_merge_result(m.value() or b"")
            for m in consume_all(kafka_bootstrap, kafka.results_topic, 10)
        ]

    def merged() -> int:
        """Plans announced."""
        return len({r["plan_id"] for r in results()})

    def shard_status() -> list[dict[str, Any]]:
        shown = CliRunner().invoke(
            main, ["status", "--shards", "--json", *args[:4], *args[6:10], "--checkpoint", str(checkpoint)]
        )
        assert shown.exit_code == 0, shown.output
        return list(json.loads(shown.output))

    a, b = Job("a", args, tmp_path), Job("b", args, tmp_path)
    jobs = [a, b]
    try:
        until(lambda: len(set(group_owners(kafka, group).values())) == 2 and len(group_owners(kafka, group)) == 4,
              jobs, "the shards split between the two jobs")  # fmt: skip
        owners = group_owners(kafka, group)
        assert sorted(Counter(owners.values()).values()) == [2, 2], owners
        until(lambda: merged() == len(tables), jobs, "one merge per table")

        # a job with another shard count is refused in seconds, naming both
        other = tmp_path / "other.yaml"
        other.write_text(CONFIG.replace(f"shards: {SHARDS}", "shards: 2"))
        started = time.monotonic()
        refused = subprocess.run(
            [COMPACTOR, "run", *args[:1], str(other), *args[2:]], capture_output=True, text=True, timeout=120
        )
        assert refused.returncode != 0 and time.monotonic() - started < 30
        line = refused.stderr.strip()
        assert (
            "operations.shards is 2, but" in line and f"with {SHARDS} shard(s)" in line and "\n" not in line
        ), line

        b_shards = sorted(s for s, who in owners.items() if f":{b.process.pid} " in who)
        b.process.kill()  # SIGKILL: no goodbye to the group
        killed = time.monotonic()
        for t in tables:  # the second week arrives while b's shards have no job
            loaded += bulk_load(spark, warehouse, kafka, 7, 40, 7, t)
        took = until(lambda: a.running().count(b_shards[-1]) >= 1 and set(a.running()) == set(range(SHARDS)),
                     [a], "the survivor taking the killed job's shards")  # fmt: skip
        assert time.monotonic() - killed < SESSION_TIMEOUT_MS / 1000 + 60, f"took {took:.0f}s after the kill"
        until(lambda: merged() == 2 * len(tables), [a], "the second week merged")

        kept_before = Counter(a.running())
        b2, c = Job("b2", args, tmp_path), Job("c", args, tmp_path)  # the killed job back, and a third
        jobs = [a, b2, c]
        until(lambda: len(set(group_owners(kafka, group).values())) == 3 and len(group_owners(kafka, group)) == 4,
              jobs, "the shards spread over three jobs")  # fmt: skip
        until(lambda: bool(b2.running() and c.running()), jobs, "the newcomers' shards running")
        owners = group_owners(kafka, group)
        a_now = {s for s, who in owners.items() if f":{a.process.pid} " in who}
        assert a_now and set(a.handed_on()) == set(range(SHARDS)) - a_now, "a stopped only what moved"
        assert Counter(a.running()) == kept_before, "a's kept queries ran on, never restarted"
        for t in tables:
            loaded += bulk_load(spark, warehouse, kafka, 7, 40, 14, t)
        until(lambda: merged() == 3 * len(tables), jobs, "the third week merged")
        until(lambda: all(s["events_behind"] == 0 for s in shard_status()), jobs, "every shard caught up", 60)
        shown, owners = shard_status(), group_owners(kafka, group)
        assert [(s["shard"], s["job"], s["tables"]) for s in shown] == [
            (i, owners[i], [t for t in tables if layout.shard_of(t) == i]) for i in range(SHARDS)
        ], "status shows which job runs which shard, and its tables"
        time.sleep(3)  # a merge run twice would announce late
    finally:
        for job in jobs:
            job.stop()

    # every table as the simulation predicts, every row once, every plan committed and announced once
    simulation = Simulation(load_config(yaml.safe_load(CONFIG)))
    store = SparkTableStore(spark, warehouse)
    for segment in loaded:
        simulation.arrive(segment)
    announced = results()
    plan_ids = [r["plan_id"] for r in announced]
    # a job SIGKILLed after announcing a merge and before saving that it did: its shard's next
    # holder reads the results topic back and sends only the outputs' events again
    assert max(Counter(plan_ids).values()) == 1, "one MergeResult per plan, the kill included"
    assert set(plan_ids) == {p.plan_id for p in simulation.merges}
    assert {r["status"] for r in announced} == {MergeStatus.SUCCEEDED}
    for t in tables:
        data = spark.read.format("delta").load(table_uri(warehouse, t))
        assert data.count() == 21 * 40, f"{t}: rows lost or doubled"
        expected = sorted(s.id for s in simulation.catalog.segments(t))
        assert sorted(r.segment_id for r in data.select("segment_id").distinct().collect()) == expected
        merges = [str(c.plan_id) for c in store.history(t) if c.op == "merge"]
        assert sorted(merges) == sorted(p.plan_id for p in simulation.merges if p.table == t), (
            f"{t}: each plan committed once, none lost"
        )

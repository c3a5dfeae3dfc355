"""Kill the job hard at each fault point, restart it on the same checkpoint, and check
that the end state equals a fault-free run: same rows, same segments, no merge twice,
and every executed merge announced (repeats only with the same plan id)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from compactor.cli.dry_run import run_plan
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.stream.faults import AFTER_BOOKKEEPING, AFTER_COMMIT, AFTER_PLANNING, POINTS
from tests.helpers.jobs import TABLE, bulk_load, run_job
from tests.helpers.streaming import checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

CONFIG_YAML = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week]\n"


# The points before the commit and after the catalog's save are the nightly run's (CI's time):
# after_commit and between_emits are the two where a restart has the most to repair. CI runs
# after_commit on S3 with these checks (test_object_stores), so its local twin is nightly too.
NIGHTLY_POINTS = {AFTER_PLANNING, AFTER_COMMIT, AFTER_BOOKKEEPING}


@pytest.mark.parametrize(
    "point", [pytest.param(p, marks=pytest.mark.nightly) if p in NIGHTLY_POINTS else p for p in POINTS]
)
def test_a_hard_kill_at_each_fault_point_changes_nothing(
    point: str, spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    loaded = bulk_load(spark, warehouse, kafka, days=14, rows=5)
    path = table_uri(warehouse, TABLE)
    before = checksum(spark.read.format("delta").load(path))
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    expected = run_plan(
        load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}),
        loaded,
        simulate=True,
    )
    args = [
        "--config", str(config), "--warehouse", str(warehouse), "--checkpoint", str(tmp_path / "cp"),
        "--bootstrap-servers", kafka_bootstrap, "--segments-topic", kafka.segments_topic,
        "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
    ]  # fmt: skip

    crashed = run_job(args, fault=point)
    assert crashed.returncode == -9, f"the job should have been killed at {point}: {crashed.stderr[-2000:]}"
    recovered = run_job(args, fault=None)
    assert recovered.returncode == 0, recovered.stderr[-3000:]

    table = spark.read.format("delta").load(path)
    assert checksum(table) == before, "same rows as before any merge"
    ids = {r.segment_id for r in table.select("segment_id").distinct().collect()}
    assert ids == {s["id"] for s in expected["segments"]}, "the same segments as a fault-free run"
    history = DeltaTable.forPath(spark, path).history().collect()
    merges = [r.userMetadata for r in history if r.userMetadata and '"op":"merge"' in r.userMetadata]
    assert len(merges) == len(expected["merges"]) == 2, "no merge executed twice"
    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    per_plan = Counter(r["plan_id"] for r in results)
    assert set(per_plan) == {m["plan_id"] for m in expected["merges"]}, "every executed merge is announced"
    assert all(r["status"].value == "SUCCEEDED" for r in results)
    assert consume_all(kafka_bootstrap, kafka.dead_letter_topic) == []

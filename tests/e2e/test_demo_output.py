"""`compactor demo` as a newcomer runs it: only its own lines, no JVM, Spark or librdkafka noise."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers.jobs import COMPACTOR

pytestmark = pytest.mark.integration


def test_the_demo_prints_its_story_and_nothing_else(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "COMPACTOR_LOG_DIR": str(tmp_path / "logs"),
    }
    began = datetime.now(UTC) - timedelta(seconds=1)
    result = subprocess.run(
        [COMPACTOR, "demo", "--workdir", str(tmp_path / "demo"), "--days", "7", "--rows", "20"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", "no JVM, Spark or librdkafka line on the console"
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Kafka at {kafka_bootstrap}", "starting Spark with Delta Lake ..."]
    assert sum(line.startswith("loaded d2024") for line in lines) == 7
    assert sum("MERGED by auto_merge (week)" in line for line in lines) == 1
    assert lines[-1] == "row count unchanged: every merge replaced its inputs atomically"
    assert not [line for line in lines if "WARN" in line or line.startswith("%")]
    assert (tmp_path / "logs" / "spark.log").is_file(), "Spark's warnings are kept in a file"

    # what-if: replaying the loads the demo recorded on its topic predicts the merges it made
    config = tmp_path / "demo.yaml"
    config.write_text("defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week, month]\n")
    replay = subprocess.run(
        [COMPACTOR, "plan", "--config", str(config), "--replay-topic", "compactor.segments",
         "--from", began.isoformat()],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stdout + replay.stderr
    doc = json.loads(replay.stdout)
    assert doc["source"]["loads"] == 7 and doc["source"]["other_events"] >= 1, (
        "the merge's own event is left out"
    )
    merged = sorted(re.findall(r"-> (m-\w+)", "\n".join(line for line in lines if "MERGED" in line)))
    predicted = sorted(f"m-{p['plan_id']}" for p in doc["candidate"]["plans"])
    assert predicted == merged and len(merged) == 1

"""The scripts in examples/ run as a reader runs them, against a real broker, Spark and Delta.

The Spark ones run in this process (their `build_spark` gets the test session, so no second
JVM starts); the others in a fresh interpreter, as a service without Spark would run them.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.job.wiring import build_handler
from compactor.kafka.topics import ensure_topics
from tests.helpers.streaming import JobRunner, consume_all, make_kafka

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2] / "examples"


def run_script(name: str, env: dict[str, str]) -> list[str]:
    """A script in a fresh interpreter; its printed lines."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env={**os.environ, **env},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def run_here(name: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], capsys: Any) -> list[str]:
    """A Spark script in this process, with the test's Spark session."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    return capsys.readouterr().out.splitlines()  # type: ignore[no-any-return]


def test_the_producer_and_consumer_examples_load_merge_and_follow(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "WAREHOUSE": str(warehouse),
        "SEGMENTS_TOPIC": kafka.segments_topic, "RESULTS_TOPIC": kafka.results_topic,
    }  # fmt: skip

    (line,) = run_here("spark_producer.py", monkeypatch, env, capsys)
    assert line.startswith("loaded orders-20240101T000000-") and ": 100 rows, " in line
    (line,) = run_script("arrow_producer.py", env)
    assert line.startswith("loaded readings-20240101T000000-") and ": 60 rows, " in line
    (line,) = run_script("own_kafka_client.py", env)
    assert line == f"announced orders-20240101 on {kafka.segments_topic}"

    clicks = tmp_path / "clicks"
    clicks.mkdir()
    first = datetime(2024, 1, 1, tzinfo=UTC)
    for hour in range(3):
        at = first + timedelta(hours=hour)
        rows = [
            {"event_time": (at + timedelta(minutes=m)).isoformat(), "user_id": m, "amount": 1.0}
            for m in range(4)
        ]
        (clicks / f"{hour}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env |= {"INPUT": str(clicks), "CHECKPOINT": str(tmp_path / "clicks-cp")}
    assert run_here("streaming_producer.py", monkeypatch, env, capsys)[-1] == "loaded 3 micro-batch(es)"

    codec = default_codec()
    announced = [
        codec.decode_segment_completed(m.value()).segment
        for m in consume_all(kafka_bootstrap, kafka.segments_topic)
    ]
    assert sorted({s.table for s in announced}) == ["clicks", "orders", "readings"]
    assert sum(s.table == "clicks" for s in announced) == 3

    config = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}
    handler = build_handler(spark, load_config(config), warehouse, kafka)
    JobRunner(spark, handler, kafka, tmp_path / "job").run_until_quiet()
    (merged,) = handler.catalog.segments("clicks")
    lines = run_script("results_consumer.py", env | {"TABLE": "clicks", "IDLE_SECONDS": "5"})
    assert lines == ["minor merged 3 into 1: 1 now", merged.id]

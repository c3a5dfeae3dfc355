"""The broker dies and comes back while the job runs: the job recovers (or is restarted
on its checkpoint) and no event is lost."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.client.loader import load_segment, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.dev.kafka_broker import LocalKafkaBroker
from compactor.job.query import start_query
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from tests.helpers.streaming import JobRunner, checksum, consume_all

# The nightly run's (CI's time): tests/faults/test_rejoin.py kills and restarts a broker under the
# real job's process in CI; this one does it under a query in the test's own driver.
pytestmark = [pytest.mark.integration, pytest.mark.nightly]


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def test_the_job_survives_a_broker_kill_and_restart(spark: Any, warehouse: Path, tmp_path: Path) -> None:
    broker = LocalKafkaBroker(tmp_path / "kafka")  # our own broker: the shared one must stay up
    bootstrap = broker.start()
    try:
        kafka = KafkaSettings(bootstrap, "seg", "res", "dead")
        ensure_topics(kafka, ["seg", "res", "dead"])
        producer = EventProducer(kafka)
        config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}})
        handler = build_handler(spark, config, warehouse, kafka, producer=producer, codec=default_codec())
        checkpoint = tmp_path / "cp"
        query = start_query(spark, handler, kafka, checkpoint, trigger_interval="500 milliseconds")

        def load(day: int) -> None:
            start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=day)
            load_segment(
                spark,
                warehouse,
                kafka,
                producer,
                "t",
                sample_rows(spark, start, start + timedelta(days=1), 4),
                start,
                start + timedelta(days=1),
                segment_id=f"d{day}",
            )

        for day in range(3):
            load(day)
        assert wait_for(lambda: handler.stats.events >= 3, 60)

        broker.kill()  # SIGKILL: no clean shutdown
        time.sleep(3)
        assert broker.restart() == bootstrap
        for day in range(3, 7):  # the loader's producer reconnects by itself
            load(day)
        # Either the running query recovers by itself, or it fails clearly (a delivery error
        # fails the batch); a restart on the same checkpoint then finishes the work.
        wait_for(lambda: handler.stats.merges >= 1 or not query.isActive, 90)
        query.stop()
        JobRunner(spark, handler, kafka, checkpoint).run_until_quiet()

        (week,) = handler.catalog.segments("t")
        assert week.end - week.start == timedelta(days=7)
        table = spark.read.format("delta").load(table_uri(warehouse, "t"))
        assert checksum(table)[0] == 28, "no row lost"
        results = [default_codec().decode_merge_result(m.value()) for m in consume_all(bootstrap, "res")]
        assert [r["output"]["segment_id"] for r in results] == [week.id]
        events = consume_all(bootstrap, "seg")
        assert len(events) == 8, "7 loads and the merge's event, none lost"
    finally:
        broker.stop()

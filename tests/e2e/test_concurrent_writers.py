"""Loaders keep appending while merges cascade: nothing lost, nothing doubled, no endless retries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import delta.exceptions
import pytest

from compactor.client.loader import load_segment, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta import spark_store
from compactor.delta.paths import table_uri
from compactor.domain.events import MergeStatus
from compactor.domain.plans import MergePlan
from compactor.job.query import start_query
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration

CONFIG = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week", "month"]}]}})


def test_a_loader_appending_during_a_cascade_loses_and_doubles_nothing(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    handler = build_handler(spark, CONFIG, warehouse, kafka, producer=producer, codec=default_codec())
    expected: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def loader() -> None:  # a month of daily loads, while the job merges weeks and the month
        try:
            for day in range(29):
                start = datetime(2024, 2, 1, tzinfo=UTC) + timedelta(days=day)
                rows = sample_rows(spark, start, start + timedelta(days=1), 7, seed=day)
                expected.append(checksum(rows))
                load_segment(
                    spark,
                    warehouse,
                    kafka,
                    producer,
                    "flows",
                    rows,
                    start,
                    start + timedelta(days=1),
                    segment_id=f"f{day:02d}",
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=loader)
    thread.start()
    query = start_query(spark, handler, kafka, tmp_path / "cp", trigger_interval="500 milliseconds")
    thread.join()
    query.processAllAvailable()
    query.stop()
    JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()  # drain the re-emitted events

    assert errors == []
    table = spark.read.format("delta").load(table_uri(warehouse, "flows"))
    assert checksum(table) == (sum(n for n, _ in expected), sum(h for _, h in expected)), (
        "no row lost or doubled"
    )
    (month,) = handler.catalog.segments("flows")
    assert (month.start, month.end) == (datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 3, 1, tzinfo=UTC))
    results = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert results and all(r["status"] is MergeStatus.SUCCEEDED for r in results)


def test_conflicts_are_retried_a_bounded_number_of_times_then_reported(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    for day in range(7):
        start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=day)
        load_segment(
            spark,
            warehouse,
            kafka,
            producer,
            "busy",
            sample_rows(spark, start, start + timedelta(days=1), 3),
            start,
            start + timedelta(days=1),
            segment_id=f"b{day}",
        )
    calls: list[str] = []

    def always_conflicting(spark_: Any, warehouse_: Path, plan: MergePlan, *_: Any) -> Any:
        calls.append(plan.plan_id)
        raise delta.exceptions.ConcurrentAppendException(
            message="Files were added to the root of the table by a concurrent update."
        )

    monkeypatch.setattr(spark_store, "execute_merge", always_conflicting)
    handler = build_handler(spark, CONFIG, warehouse, kafka, producer=producer, codec=default_codec())
    JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()
    (result,) = [
        default_codec().decode_merge_result(m.value())
        for m in consume_all(kafka_bootstrap, kafka.results_topic)
    ]
    assert result["status"] is MergeStatus.FAILED and "ConcurrentAppendException" in result["error"]
    assert len(calls) == 5 and handler.stats.conflicts == 4, "bounded retries with backoff, then reported"
    assert len(handler.catalog.segments("busy")) == 7, "nothing changed"

"""The rule engine inside the real stream: same plans as the dry run, operator requests, pools."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.cli.dry_run import run_plan
from compactor.client.loader import load_segment, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta import spark_store
from compactor.domain.events import CompactionRequested
from compactor.domain.plans import MergePlan
from compactor.job.wiring import build_handler
from compactor.kafka.messages import DEAD_LETTER_REASON_HEADER
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.stream.handler import BatchHandler
from tests.helpers.streaming import JobRunner, checksum, consume_all, make_kafka

pytestmark = pytest.mark.integration


def handler(spark: Any, warehouse: Path, kafka: KafkaSettings, config: dict[str, Any]) -> BatchHandler:
    return build_handler(
        spark, load_config(config), warehouse, kafka, producer=EventProducer(kafka), codec=default_codec()
    )


def load(
    spark: Any, warehouse: Path, kafka: KafkaSettings, table: str, start: datetime, width: timedelta, sid: str
) -> Any:
    return load_segment(
        spark, warehouse, kafka, EventProducer(kafka), table,
        sample_rows(spark, start, start + width, 10, seed=hash(sid) % 1000), start, start + width, segment_id=sid,
    )  # fmt: skip


def results(bootstrap: str, kafka: KafkaSettings) -> list[dict[str, Any]]:
    return [
        default_codec().decode_merge_result(m.value()) for m in consume_all(bootstrap, kafka.results_topic)
    ]


def test_stream_plans_exactly_what_the_simulation_prints(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    config = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 2]}]}}
    job = JobRunner(spark, handler(spark, warehouse, kafka, config), kafka, tmp_path / "cp")
    loaded = []
    for i in range(5):
        start = datetime(2024, 5, 1, tzinfo=UTC) + timedelta(days=i)
        loaded.append(load(spark, warehouse, kafka, "events", start, timedelta(days=1), f"L{i}"))
        job.run_until_quiet()  # each arrival settles before the next, as in --simulate
    streamed = [(r["plan_id"], r["rule"], r["level"], r["inputs"]) for r in results(kafka_bootstrap, kafka)]
    dry_run = run_plan(load_config(config), loaded, simulate=True)
    assert streamed == [(m["plan_id"], m["rule"], m["level"], m["inputs"]) for m in dry_run["merges"]]
    assert len(streamed) == 3
    assert sorted(s.id for s in job.handler.catalog.segments("events")) == sorted(
        s["id"] for s in dry_run["segments"]
    )


def test_operator_requests_run_manual_rules_and_merges(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    config = {"defaults": {"rules": [{"rule": "major", "size_threshold": "1GB", "trigger": "manual"}]}}
    job = JobRunner(spark, handler(spark, warehouse, kafka, config), kafka, tmp_path / "cp")
    for i in range(4):
        load(
            spark,
            warehouse,
            kafka,
            "ledger",
            datetime(2024, 6, 1 + i, tzinfo=UTC),
            timedelta(days=1),
            f"S{i}",
        )
    job.run_until_quiet()
    assert job.handler.stats.merges == 0, "a manual rule does not run on load"
    before = checksum(spark.read.format("delta").load(str(warehouse / "ledger")))

    codec, producer = default_codec(), EventProducer(kafka)

    def ask(rule: str | None = None, ids: tuple[str, ...] = ()) -> None:
        event = CompactionRequested(uuid.uuid4().hex, "ledger", datetime.now(UTC), rule, ids)
        producer.send_all([(kafka.segments_topic, "ledger", codec.encode_compaction_requested(event), None)])

    ask(ids=("S0", "S9"))  # invalid: S9 does not exist
    ask(rule="minor")  # not configured for this table
    ask(rule="major")
    job.run_until_quiet()
    done = results(kafka_bootstrap, kafka)
    assert [(r["rule"], r["inputs"]) for r in done] == [("major", ["S0", "S1", "S2", "S3"])]
    dead = consume_all(kafka_bootstrap, kafka.dead_letter_topic)
    reasons = [dict(m.headers())[DEAD_LETTER_REASON_HEADER].decode() for m in dead]
    assert reasons == ["manual_merge_rejected", "unknown_rule"]
    assert checksum(spark.read.format("delta").load(str(warehouse / "ledger"))) == before

    load(spark, warehouse, kafka, "ledger", datetime(2024, 6, 5, tzinfo=UTC), timedelta(days=1), "S4")
    merged = done[0]["output"]["segment_id"]
    ask(ids=(merged, "S4"))
    job.run_until_quiet()
    assert [(r["rule"], r["inputs"]) for r in results(kafka_bootstrap, kafka)][-1] == (
        "manual",
        [merged, "S4"],
    )  # inputs in time order
    assert [s.id for s in job.handler.catalog.segments("ledger")] == [
        results(kafka_bootstrap, kafka)[-1]["output"]["segment_id"]
    ]


def test_bin_pack_merges_run_in_the_scheduler_pool_of_their_pool(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    seen: list[str | None] = []
    real = spark_store.execute_merge

    def recording(spark_: Any, warehouse_: Path, plan: MergePlan, *rest: Any) -> Any:
        seen.append(spark_.sparkContext.getLocalProperty("spark.scheduler.pool"))
        return real(spark_, warehouse_, plan, *rest)

    monkeypatch.setattr(spark_store, "execute_merge", recording)
    config = {"defaults": {"rules": [{"rule": "bin_pack", "strategy": "best_fit"}]}}
    job = JobRunner(spark, handler(spark, warehouse, kafka, config), kafka, tmp_path / "cp")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    for i in range(3):  # fresh 10-minute segments: the "small" pool
        load(
            spark,
            warehouse,
            kafka,
            "clicks",
            now - timedelta(minutes=30 - 10 * i),
            timedelta(minutes=10),
            f"C{i}",
        )
    job.run_until_quiet()
    done = results(kafka_bootstrap, kafka)
    assert done and done[0]["pool"] in {"small", "medium"}
    assert seen and seen[0] == done[0]["pool"]
    assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") is None

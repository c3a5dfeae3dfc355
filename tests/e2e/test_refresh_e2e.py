"""Segment refresh on config drift (Pinot's segment refresh) on real Kafka, Spark and Delta.

Each test loads segments built with one layout, publishes another, asks for a
refresh, and checks the exact rows, the segment layout after, and that segments
which already conformed were not rewritten (their files are unchanged).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.client.loader import load_segment
from compactor.codec.events import default_codec
from compactor.config.built_with import layout_record
from compactor.config.loading import load_config
from compactor.config.tables import ProjectConfig
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.index_check import index_facts
from compactor.domain.events import CompactionRequested
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.stream.handler import BatchHandler
from tests.helpers.streaming import DownstreamReader, JobRunner, consume_all, make_kafka

pytestmark = pytest.mark.integration

TABLE = "events"
DAY = datetime(2024, 4, 1, tzinfo=UTC)
BASE_COLUMNS: dict[str, Any] = {
    "event_time": {"type": "timestamp"},
    "created": {"type": "timestamp"},
    "customer_id": {"type": "int"},
    "amount": {"type": "decimal(10,2)"},
    "channel": {"type": "string"},
}


def config(version: int, rule: dict[str, Any] | None = None, **layout: Any) -> ProjectConfig:
    spec = {"time_column": "event_time", "bucket_time_period": "1d", "columns": BASE_COLUMNS} | layout
    refresh = {"rule": "refresh", "trigger": "manual"} | (rule or {})
    return load_config({"tables": {TABLE: {"config_version": version, "layout": spec, "rules": [refresh]}}})


def rows(spark: Any, day: int, n: int = 6, span_days: int = 1, shuffled: bool = True) -> Any:
    """n rows of day `day` (spread over `span_days`), customer ids descending when `shuffled`."""
    start = int((DAY + timedelta(days=day)).timestamp())
    step = span_days * 86400 // n
    customer = (F.lit(n) - F.col("id")) if shuffled else F.col("id")
    return spark.range(n).select(
        F.timestamp_seconds(F.lit(start) + F.col("id") * step).alias("event_time"),
        F.timestamp_seconds(F.lit(start) + F.col("id") * 60).alias("created"),
        (customer + day * 10).cast("int").alias("customer_id"),
        (F.col("id") * 1.5 + day).cast("decimal(10,2)").alias("amount"),
        F.when(F.col("id") % 2 == 0, "web").otherwise("app").alias("channel"),
    )


class Scenario:
    def __init__(self, spark: Any, warehouse: Path, kafka: KafkaSettings, tmp: Path) -> None:
        self.spark, self.warehouse, self.kafka, self.tmp = spark, warehouse, kafka, tmp
        self.producer = EventProducer(kafka)
        self.path = table_uri(warehouse, TABLE)

    def load(self, sid: str, data: Any, day: int, built: ProjectConfig, days: int = 1) -> None:
        settings = built.for_table(TABLE)
        assert settings.layout is not None
        start = DAY + timedelta(days=day)
        load_segment(
            self.spark, self.warehouse, self.kafka, self.producer, TABLE, data, start, start + timedelta(days=days),
            segment_id=sid, built_with=layout_record(settings.layout, settings.config_version),
        )  # fmt: skip

    def files(self, sid: str) -> list[str]:
        return sorted(self.table().where(F.col("segment_id") == sid).inputFiles())

    def table(self) -> Any:
        return self.spark.read.format("delta").load(self.path)

    def refresh(self, now: ProjectConfig) -> BatchHandler:
        handler = build_handler(
            self.spark, now, self.warehouse, self.kafka, producer=self.producer, codec=default_codec()
        )
        job = JobRunner(self.spark, handler, self.kafka, self.tmp / f"cp-{uuid.uuid4().hex[:6]}")
        request = CompactionRequested(uuid.uuid4().hex, TABLE, datetime.now(UTC), "refresh")
        self.producer.send_all(
            [(self.kafka.segments_topic, TABLE, default_codec().encode_compaction_requested(request), None)]
        )
        job.run_until_quiet()
        assert handler.stats.failed_merges == 0
        return handler

    def results(self) -> list[dict[str, Any]]:
        return [
            default_codec().decode_merge_result(m.value())
            for m in consume_all(self.kafka.bootstrap_servers, self.kafka.results_topic)
        ]


@pytest.fixture
def scenario(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> Scenario:
    return Scenario(spark, warehouse, make_kafka(kafka_bootstrap, unique), tmp_path)


def tuples(df: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select(*columns).collect())


def test_time_column_changed_rebuckets_by_the_new_column(scenario: Scenario) -> None:
    v1, v2 = config(1), config(2, time_column="created")
    scenario.load("a", rows(scenario.spark, 0, span_days=1), 0, v1)
    before = tuples(scenario.table(), *BASE_COLUMNS)
    handler = scenario.refresh(v2)
    assert tuples(scenario.table(), *BASE_COLUMNS) == before
    (out,) = handler.catalog.segments(TABLE)
    assert out.range.start == DAY and out.id.startswith("r-")
    assert '"time_column":"created"' in out.built_with


def test_rows_of_several_buckets_and_partitions_are_split_one_per_output(scenario: Scenario) -> None:
    now = config(1, partitioning={"column": "customer_id", "function": "modulo", "num_partitions": 2})
    scenario.load("wide", rows(scenario.spark, 0, n=8, span_days=2), 0, now, days=2)
    good = scenario.spark.range(3).select(
        F.timestamp_seconds(F.lit(int((DAY + timedelta(days=5)).timestamp())) + F.col("id")).alias(
            "event_time"
        ),
        F.timestamp_seconds(F.lit(0)).alias("created"),
        (F.col("id") * 2).cast("int").alias("customer_id"),  # all even: one partition
        F.lit(1).cast("decimal(10,2)").alias("amount"),
        F.lit("web").alias("channel"),
    )
    scenario.load("good", good, 5, now)
    untouched = scenario.files("good")
    before = tuples(scenario.table(), *BASE_COLUMNS)
    handler = scenario.refresh(now)
    assert tuples(scenario.table(), *BASE_COLUMNS) == before
    assert scenario.files("good") == untouched, "a conforming segment is not rewritten"
    outputs = {s.id: s for s in handler.catalog.segments(TABLE) if s.id != "good"}
    assert len(outputs) == 4  # 2 days x 2 partitions
    layout = now.for_table(TABLE).layout
    assert layout is not None
    for sid, segment in outputs.items():
        part = scenario.table().where(F.col("segment_id") == sid)
        assert part.select((F.col("customer_id") % 2).alias("p")).distinct().count() == 1
        days = part.select(F.to_date("event_time")).distinct().collect()
        assert len(days) == 1 and segment.range.duration == timedelta(days=1)
        facts = index_facts(scenario.spark, scenario.warehouse, TABLE, segment, layout)
        assert (facts.bucket_count, facts.partition_count) == (1, 1)


def test_unsorted_rows_are_sorted_and_sorted_ones_left_alone(scenario: Scenario) -> None:
    now = config(1, sorted_column="customer_id")
    scenario.load("unsorted", rows(scenario.spark, 0, shuffled=True), 0, now)
    scenario.load("sorted", rows(scenario.spark, 1, shuffled=False).coalesce(1), 1, now)
    untouched = scenario.files("sorted")
    handler = scenario.refresh(now)
    assert scenario.files("sorted") == untouched
    layout = now.for_table(TABLE).layout
    assert layout is not None
    refreshed = [s for s in handler.catalog.segments(TABLE) if s.id.startswith("r-")]
    assert len(refreshed) == 1
    assert index_facts(scenario.spark, scenario.warehouse, TABLE, refreshed[0], layout).sorted


def test_added_column_is_filled_with_its_default(scenario: Scenario) -> None:
    v1 = config(1)
    v2 = config(2, columns=BASE_COLUMNS | {"region": {"type": "string", "default": "emea"}})
    scenario.load("a", rows(scenario.spark, 0), 0, v1)
    before = tuples(scenario.table(), *BASE_COLUMNS)
    scenario.refresh(v2)
    after = scenario.table()
    assert tuples(after, *BASE_COLUMNS) == before
    assert {r.region for r in after.select("region").collect()} == {"emea"}


def test_removed_column_is_dropped_from_every_segment_the_preserved_one_too(scenario: Scenario) -> None:
    """A table-wide rewrite replaces every segment, the one `preserve_latest` keeps out too:
    the catalog must follow, or it would keep a segment Delta no longer has."""
    v1 = config(1)
    columns = {k: v for k, v in BASE_COLUMNS.items() if k != "channel"}
    layout = {"time_column": "event_time", "bucket_time_period": "1d", "columns": columns}
    rules = [{"rule": "refresh", "trigger": "manual"}]
    v2 = load_config(
        {"tables": {TABLE: {"config_version": 2, "layout": layout, "rules": rules, "preserve_latest": 1}}}
    )
    scenario.load("a", rows(scenario.spark, 0), 0, v1)
    scenario.load("b", rows(scenario.spark, 1), 1, v1)
    before = tuples(scenario.table(), "event_time", "customer_id", "amount")
    handler = scenario.refresh(v2)
    after = scenario.table()
    assert "channel" not in after.columns
    assert tuples(after, "event_time", "customer_id", "amount") == before
    in_delta = {r.segment_id for r in after.select("segment_id").distinct().collect()}
    assert {s.id for s in handler.catalog.segments(TABLE)} == in_delta
    assert not in_delta & {"a", "b"}, "both were rewritten, the preserved one included"


def test_changed_type_and_single_to_multi_value_are_cast(scenario: Scenario) -> None:
    v1 = config(1)
    columns = BASE_COLUMNS | {
        "amount": {"type": "double"},
        "channel": {"type": "string", "multi_value": True},
    }
    scenario.load("a", rows(scenario.spark, 0), 0, v1)
    before = tuples(scenario.table(), "customer_id", "amount", "channel")
    scenario.refresh(config(2, columns=columns))
    after = scenario.table()
    types = dict(after.dtypes)
    assert types["amount"] == "double" and types["channel"] == "array<string>"
    assert tuples(after, "customer_id", "amount", "channel") == sorted(
        (c, float(a), [ch]) for c, a, ch in before
    )


def test_compression_change_rewrites_files_with_the_new_codec(scenario: Scenario) -> None:
    v1, v2 = config(1), config(2, compression="zstd", encoding="plain")
    scenario.load("a", rows(scenario.spark, 0), 0, v1)
    before = tuples(scenario.table(), *BASE_COLUMNS)
    handler = scenario.refresh(v2)
    (out,) = handler.catalog.segments(TABLE)
    layout = v2.for_table(TABLE).layout
    assert layout is not None
    facts = index_facts(scenario.spark, scenario.warehouse, TABLE, out, layout)
    assert (facts.compression, facts.encoding) == ("zstd", "plain")
    assert tuples(scenario.table(), *BASE_COLUMNS) == before


def test_an_upsert_tables_refresh_rewrites_a_segment_whole_never_split_or_rebucketed(
    scenario: Scenario,
) -> None:
    """Seed 004: an upsert table stays M:1. A compression change rewrites the segment in the
    new codec as ONE output with its own range and every row (keys intact), although its rows
    span three daily buckets and outnumber max_records_per_segment."""

    def upsert(version: int, **lay: Any) -> ProjectConfig:
        spec = {"time_column": "event_time", "bucket_time_period": "1d", "columns": BASE_COLUMNS} | lay
        refresh = {"rule": "refresh", "trigger": "manual", "max_records_per_segment": 2}
        table = {"config_version": version, "layout": spec, "rules": [refresh],
                 "upsert": {"primary_key": ["customer_id"], "comparison_column": "created"}}  # fmt: skip
        return load_config({"tables": {TABLE: table}})

    v1, v2 = upsert(1), upsert(2, compression="zstd")
    scenario.load("a", rows(scenario.spark, 0, n=6, span_days=3), 0, v1, days=3)
    before = tuples(scenario.table(), *BASE_COLUMNS)
    handler = scenario.refresh(v2)
    (out,) = handler.catalog.segments(TABLE)
    assert out.id != "a" and (out.start, out.end, out.records) == (DAY, DAY + timedelta(days=3), 6)
    layout = v2.for_table(TABLE).layout
    assert layout is not None
    assert index_facts(scenario.spark, scenario.warehouse, TABLE, out, layout).compression == "zstd"
    assert tuples(scenario.table(), *BASE_COLUMNS) == before, "every row, every key, as it was"
    (result,) = scenario.results()
    assert result["inputs"] == ["a"] and [o["segment_id"] for o in result["outputs"]] == [out.id]


def test_rollup_and_dedup_exact_results(scenario: Scenario) -> None:
    base = rows(scenario.spark, 0, n=6)
    dupes = base.unionByName(base.limit(2))
    v1 = config(1)
    scenario.load("a", dupes, 0, v1)
    # merge_type applies when a segment is rewritten; a compression change makes it drift
    scenario.refresh(config(2, rule={"merge_type": "dedup"}, compression="gzip"))
    assert scenario.table().count() == 6
    assert tuples(scenario.table(), *BASE_COLUMNS) == tuples(base, *BASE_COLUMNS)
    rollup = config(
        3,
        rule={"merge_type": "rollup", "aggregations": {"amount": "sum"}, "round_bucket_time_period": "1d"},
        columns={
            "event_time": {"type": "timestamp"},
            "channel": {"type": "string"},
            "amount": {"type": "decimal(10,2)"},
        },
    )
    scenario.refresh(rollup)
    got = {r.channel: r.amount for r in scenario.table().collect()}
    # rows 0..5: amount = 1.5 * i; web = even ids (0, 3, 6), app = odd (1.5, 4.5, 7.5)
    assert got == {"web": Decimal("9.00"), "app": Decimal("13.50")}
    assert scenario.table().select("event_time").distinct().collect()[0][0].hour == 0


def test_rollup_unions_distinct_count_sketches(scenario: Scenario) -> None:
    """A sketch column rolls up as the union of its sketches: distinct customers, not a sum of counts."""
    base = rows(scenario.spark, 0, n=6).withColumn(
        "customer_id", F.floor(F.col("customer_id") / 4).cast("int")
    )
    # one sketch per row (each row's event time is unique), as a producer pre-aggregating would write
    sketched = base.groupBy(*BASE_COLUMNS).agg(F.hll_sketch_agg("customer_id").alias("users"))
    columns = {**BASE_COLUMNS, "users": {"type": "binary"}}
    scenario.load("a", sketched, 0, config(1, columns=columns))
    rollup = config(
        2,
        rule={
            "merge_type": "rollup",
            "aggregations": {"amount": "sum", "users": "distinct_count_hll"},
            "round_bucket_time_period": "1d",
        },
        columns={key: columns[key] for key in ("event_time", "channel", "amount", "users")},
    )
    scenario.refresh(rollup)
    got = {
        r.channel: (r.amount, r.distinct)
        for r in scenario.table()
        .select("channel", "amount", F.hll_sketch_estimate("users").alias("distinct"))
        .collect()
    }
    # customers 6..1 // 4: web (ids 0, 2, 4) has 1, 1, 0 and app (ids 1, 3, 5) 1, 0, 0: two each
    expected = {
        channel: (sum((r.amount for r in rs), Decimal(0)), len({r.customer_id for r in rs}))
        for channel in ("web", "app")
        for rs in [[r for r in base.collect() if r.channel == channel]]
    }
    assert got == expected == {"web": (Decimal("9.00"), 2), "app": (Decimal("13.50"), 2)}


def test_sizing_limits_and_the_rest_next_time(scenario: Scenario) -> None:
    limits = {
        "max_records_per_segment": 4,
        "max_records_per_task": 4,
        "table_max_num_tasks": 1,
        "trigger": "on_load",
    }
    now = config(1, rule=limits)
    old = config(1, compression="gzip")  # recorded as built with gzip: every segment has drifted
    for day in range(3):
        scenario.load(f"s{day}", rows(scenario.spark, day, n=4), day, old)
    handler = scenario.refresh(now)
    results = scenario.results()
    # one task per evaluation; each task's completion event triggers the next evaluation
    assert [len(r["inputs"]) for r in results] == [1, 1, 1]
    assert all(r["records_out"] <= 4 for r in results)
    assert sorted(s.records for s in handler.catalog.segments(TABLE)) == [4, 4, 4]
    big = config(2, rule={"max_records_per_segment": 2, "max_records_per_task": 4, "trigger": "on_load"})
    handler = scenario.refresh(big)
    assert sorted(s.records for s in handler.catalog.segments(TABLE)) == [2] * 6, (
        "oversized segments are split"
    )
    assert DeltaTable.forPath(scenario.spark, scenario.path).toDF().count() == 12


def test_a_published_config_triggers_the_refresh_and_survives_a_restart(scenario: Scenario) -> None:
    from compactor.config.publishing import config_events
    from compactor.delta.table_ops.properties import load_table_config
    from compactor.domain.clock import now_utc
    from compactor.kafka.messages import DEAD_LETTER_REASON_HEADER

    v1, v2 = config(1), config(2, compression="zstd")
    scenario.load("a", rows(scenario.spark, 0), 0, v1)
    codec = default_codec()
    handler = build_handler(
        scenario.spark, v1, scenario.warehouse, scenario.kafka, producer=scenario.producer, codec=codec
    )
    job = JobRunner(scenario.spark, handler, scenario.kafka, scenario.tmp / "cp")
    job.run_until_quiet()
    assert handler.stats.merges == 0
    (event,) = config_events(v2, [TABLE], now_utc())
    bad = event.__class__(TABLE, 3, '{"rules": [{"rule": "refresh"}]}', now_utc())  # refresh without a layout
    scenario.producer.send_all(
        [(scenario.kafka.segments_topic, TABLE, codec.encode_config_applied(e), None) for e in (event, bad)]
    )
    job.run_until_quiet()
    assert handler.configs.for_table(TABLE).config_version == 2
    (out,) = handler.catalog.segments(TABLE)
    assert out.id.startswith("r-") and '"compression":"zstd"' in out.built_with
    assert load_table_config(scenario.spark, scenario.warehouse, TABLE) == event.settings_json
    dead = consume_all(scenario.kafka.bootstrap_servers, scenario.kafka.dead_letter_topic)
    assert [dict(m.headers())[DEAD_LETTER_REASON_HEADER] for m in dead] == [b"invalid_config"]
    restarted = build_handler(
        scenario.spark, v1, scenario.warehouse, scenario.kafka, producer=scenario.producer, codec=codec
    )
    assert restarted.configs.for_table(TABLE).config_version == 2, (
        "the published config is read back from Delta"
    )


def test_layout_refreshes_are_invisible_to_streaming_readers_and_rollups_are_not(
    scenario: Scenario, tmp_path: Path
) -> None:
    """A compression-only refresh rearranges rows (dataChange=false); a rollup changes them.

    A streaming reader without options stops at the rollup commit, as Delta does
    for any update of existing rows; one with `skipChangeCommits` (docs/reading.md's
    advice for tables with such rules) skips that commit and keeps reading loads.
    """
    base = rows(scenario.spark, 0, n=6)
    scenario.load("a", base.unionByName(base.limit(2)), 0, config(1))
    plain = DownstreamReader(scenario.spark, Path(scenario.path), tmp_path / "plain")
    skipping = DownstreamReader(
        scenario.spark, Path(scenario.path), tmp_path / "skip", {"skipChangeCommits": "true"}
    )
    plain.run()
    skipping.run()

    scenario.refresh(config(2, compression="gzip"))
    plain.run()  # the layout refresh is skipped as a rearrangement
    assert plain.seen().count() == 8

    rollup = config(3, rule={"merge_type": "rollup", "aggregations": {"amount": "sum"}}, compression="zstd")
    scenario.refresh(rollup)
    assert [r["data_change"] for r in scenario.results()] == [False, True]
    assert scenario.table().count() == 6  # the two duplicated rows were rolled up
    with pytest.raises(RuntimeError, match="DELTA_SOURCE_TABLE_IGNORE_CHANGES"):
        plain.run()

    scenario.load("b", rows(scenario.spark, 1, n=4), 1, rollup)
    skipping.run()
    seen = skipping.seen()
    assert seen.count() == 8 + 4, "the loads, without the rollup's rewritten rows"
    assert tuples(seen.where("segment_id = 'b'"), *BASE_COLUMNS) == tuples(
        rows(scenario.spark, 1, n=4), *BASE_COLUMNS
    )

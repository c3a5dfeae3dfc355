"""Refresh planning (Pinot's segment refresh): each drift kind, sizing, and the per-evaluation limits."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compactor.config.built_with import layout_record
from compactor.config.layout import LayoutConfig
from compactor.config.loading import load_config
from compactor.config.rules import RefreshRule
from compactor.config.tables import TableSettings
from compactor.domain.columns import TableSegments
from compactor.domain.layout import IndexFacts
from compactor.domain.plans import SkipReason
from compactor.domain.segments import Segment, SegmentState, TimeRange
from compactor.errors import ConfigError
from compactor.rules.engine import evaluate
from compactor.rules.refresh import Drift, drift
from tests.helpers.segments import seg

NOW = datetime(2030, 1, 1, tzinfo=UTC)
COLUMNS = {"ts": {"type": "timestamp"}, "k": {"type": "int"}, "v": {"type": "string"}}


def layout(**changes: object) -> LayoutConfig:
    spec = {"time_column": "ts", "bucket_time_period": "1d", "columns": COLUMNS} | changes
    return LayoutConfig.model_validate(spec)


GOOD = IndexFacts(
    {"ts": ("timestamp", False), "k": ("int", False), "v": ("string", False)},
    1,
    0,
    True,
    "dictionary",
    "snappy",
)


@pytest.mark.parametrize(
    ("was", "now", "facts", "expected"),
    [
        (layout(), layout(), GOOD, []),
        (layout(), layout(time_column="k"), GOOD, [Drift.TIME_COLUMN]),
        (layout(), layout(partitioning={"column": "k", "num_partitions": 2}), GOOD, [Drift.PARTITIONING]),
        (layout(), layout(sorted_column="k"), GOOD, [Drift.SORTED_COLUMN]),
        (layout(), layout(compression="zstd"), GOOD, [Drift.COMPRESSION]),
        (layout(), layout(encoding="plain"), GOOD, [Drift.ENCODING]),
        (layout(), layout(columns=COLUMNS | {"n": {"type": "int"}}), GOOD, [Drift.COLUMN_ADDED]),
        (
            layout(),
            layout(columns={"ts": {"type": "timestamp"}, "k": {"type": "int"}}),
            GOOD,
            [Drift.COLUMN_REMOVED],
        ),
        (layout(), layout(columns=COLUMNS | {"k": {"type": "bigint"}}), GOOD, [Drift.DATA_TYPE]),
        (
            layout(),
            layout(columns=COLUMNS | {"v": {"type": "string", "multi_value": True}}),
            GOOD,
            [Drift.SINGLE_MULTI_VALUE],
        ),
    ],
)
def test_each_drift_kind(
    was: LayoutConfig, now: LayoutConfig, facts: IndexFacts, expected: list[Drift]
) -> None:
    segment = seg("s", "2024-01-01", built_with=layout_record(was, 1))
    assert drift(segment, now, facts) == expected


def test_the_index_check_finds_what_the_record_cannot() -> None:
    now = layout(partitioning={"column": "k", "num_partitions": 2}, sorted_column="k")
    segment = seg("s", "2024-01-01", built_with=layout_record(now, 1))
    facts = IndexFacts(GOOD.columns, 2, 2, False, "plain", "gzip")
    assert drift(segment, now, facts) == [
        Drift.TIME_BUCKETS, Drift.MULTIPLE_PARTITIONS, Drift.UNSORTED, Drift.COMPRESSION,
    ], "plain files may come from a dictionary writer that fell back: not proof of drift"  # fmt: skip
    plain = layout(partitioning={"column": "k", "num_partitions": 2}, sorted_column="k", encoding="plain")
    dictionary = IndexFacts(GOOD.columns, 1, 1, True, "dictionary", "snappy")
    assert drift(seg("p", "2024-01-01", built_with=layout_record(plain, 1)), plain, dictionary) == [
        Drift.ENCODING
    ]
    assert drift(segment, now, None) == [], "skip_index_check trusts the record"
    assert drift(seg("raw", "2024-01-01"), now, None) == [Drift.NO_LAYOUT_RECORDED]


def table(rule: dict[str, object], **lay: object) -> TableSettings:
    return load_config(
        {
            "tables": {
                "t": {
                    "layout": {"time_column": "ts", "bucket_time_period": "1d", "columns": COLUMNS} | lay,
                    "rules": [{"rule": "refresh"} | rule],
                }
            }
        }
    ).for_table("t")


def test_limits_per_evaluation_and_table_wide_changes() -> None:
    old = layout(compression="gzip")
    segments = [
        seg(f"s{i}", f"2024-01-0{i + 1}", records=10, bytes=100, built_with=layout_record(old, 1))
        for i in range(5)
    ]
    settings = table(
        {
            "max_records_per_segment": 10,
            "max_records_per_task": 20,
            "table_max_num_tasks": 2,
            "skip_index_check": True,
        }
    )
    evaluation = evaluate("t", segments, settings, NOW)
    assert [p.input_ids for p in evaluation.plans] == [("s0", "s1"), ("s2", "s3")]
    assert {d.segment_id: d.reason for d in evaluation.decisions if not d.chosen} == {
        "s4": SkipReason.TASK_LIMIT
    }
    wide = table({"skip_index_check": True}, columns={"ts": {"type": "timestamp"}})
    (plan,) = evaluate("t", segments, wide, NOW).plans
    assert len(plan.inputs) == 5, "a removed column rewrites the whole table in one task"


def test_oversized_and_undersized_segments() -> None:
    now = layout()
    ok = layout_record(now, 1)
    big = seg("big", "2024-01-01", records=30, built_with=ok)
    small = [seg(f"m{i}", "2024-01-02", records=2, built_with=ok) for i in range(2)]
    settings = table({"max_records_per_segment": 10, "skip_index_check": True})
    plans = evaluate("t", [big, *small], settings, NOW).plans
    # big is oversized; m0 and m1 share a day and together fit the targets: undersized
    assert [p.input_ids for p in plans] == [("big", "m0", "m1")]


def test_refresh_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="needs the table's `layout`"):
        load_config({"tables": {"t": {"rules": [{"rule": "refresh"}]}}})
    with pytest.raises(ConfigError, match="merge_type rollup needs `aggregations`"):
        table({"merge_type": "rollup"})
    with pytest.raises(ConfigError, match="table_max_num_tasks"):
        table({"table_max_num_tasks": 0})
    with pytest.raises(ConfigError, match="sorted_column 'nope' is not one of the columns"):
        table({}, sorted_column="nope")
    with pytest.raises(ConfigError, match="max_records_per_task must be at least max_records_per_segment"):
        table({"max_records_per_task": 10, "max_records_per_segment": 20})
    assert RefreshRule(rule="refresh").desired_segment_size == 500 << 20


@pytest.mark.parametrize(
    ("filters", "kept_out", "reason"),
    [
        ({"preserve_latest": 1}, "s4", "preserved"),
        ({"allowed_compaction_days": 3}, "s0", "too_old"),
        ({"lookback": "6d"}, "s0", "outside_lookback"),
        ({}, "s2", "not_completed"),  # a segment still loading
    ],
)
def test_a_table_wide_rewrite_takes_every_segment_and_says_which_the_filters_would_keep(
    filters: dict[str, object], kept_out: str, reason: str
) -> None:
    """The overwrite replaces the whole table, so the plan lists every segment: otherwise the
    catalog would keep entries Delta no longer has."""
    old = layout(compression="gzip")
    now = datetime(2024, 1, 10, tzinfo=UTC)
    segments = [
        replace(
            seg(f"s{i}", f"2024-01-0{i + 1}", records=10, built_with=layout_record(old, 1)),
            loaded_at=datetime(2024, 1, 2 * i + 1, tzinfo=UTC),
            state=SegmentState.LOADING if i == 2 and not filters else SegmentState.ONLINE,
        )
        for i in range(5)
    ]
    settings = {k: timedelta(days=6) if k == "lookback" else v for k, v in filters.items()}
    wide = table({"skip_index_check": True}, columns={"ts": {"type": "timestamp"}}).model_copy(
        update=settings
    )
    evaluation = evaluate("t", segments, wide, now)
    (plan,) = evaluation.plans
    assert plan.table_wide and plan.input_ids == tuple(f"s{i}" for i in range(5))
    (decision,) = [d for d in evaluation.decisions if d.segment_id == kept_out]
    assert decision.chosen and decision.plan_id == plan.plan_id
    assert f"although {reason}" in decision.detail and "table-wide" in decision.detail


def test_rows_holding_other_sub_partition_values_than_the_catalog_drift() -> None:
    """After the sub-partition column changes, the index check finds the new column's values."""
    now = layout()
    segment = seg("s", "2024-01-01", built_with=layout_record(now, 1), sub_partitions=frozenset({"eu"}))
    assert drift(segment, now, replace(GOOD, sub_partition_values=frozenset({"eu"}))) == []
    assert drift(segment, now, replace(GOOD, sub_partition_values=frozenset({"web", "app"}))) == [
        Drift.SUB_PARTITION_VALUES
    ]
    assert drift(segment, now, GOOD) == [], "a table without sub-partitions checks no values"


def upsert_table(rule: dict[str, object], **lay: object) -> TableSettings:
    spec = {"time_column": "ts", "bucket_time_period": "1d", "columns": COLUMNS} | lay
    upsert = {"primary_key": ["k"], "comparison_column": "ts"}
    config = {"tables": {"t": {"layout": spec, "upsert": upsert, "rules": [{"rule": "refresh"} | rule]}}}
    return load_config(config).for_table("t")


def test_an_upsert_tables_refresh_rewrites_each_segment_whole_and_never_splits_or_rebuckets() -> None:
    ok, gzip = layout_record(layout(), 1), layout_record(layout(compression="gzip"), 1)
    segments = [
        seg("codec", "2024-01-01", records=30, built_with=gzip),  # compression drifted, oversized too
        seg("big", "2024-01-02", records=30, built_with=ok),  # oversized only: a split, refused
        replace(seg("span", "2024-01-03", records=2, built_with=ok), range=seg("x", "2024-01-03").range),
        *(seg(f"m{i}", "2024-01-05", records=2, built_with=ok) for i in range(2)),  # undersized pair
    ]
    settings = upsert_table({"max_records_per_segment": 10, "skip_index_check": True})
    evaluation = evaluate("t", segments, settings, NOW)
    (plan,) = evaluation.plans
    assert plan.input_ids == ("codec",) and plan.output.range == segments[0].range, "1:1, its own range"
    why = {d.segment_id: (d.reason, d.detail) for d in evaluation.decisions if not d.chosen}
    assert why["big"] == (
        SkipReason.KEEPS_M_TO_1,
        "oversized: an upsert table's segments are never re-bucketed, repartitioned or split (M:1)",
    )
    assert why["m0"][0] is SkipReason.CONFORMS, "no undersized merge by time bucket either"
    plain = table({"max_records_per_segment": 10, "skip_index_check": True})
    (packed,) = evaluate("t", segments, plain, NOW).plans
    assert set(packed.input_ids) == {"codec", "big", "m0", "m1"}, "a plain table's refresh takes them all"


def test_an_upsert_tables_refresh_leaves_time_buckets_and_schema_alone() -> None:
    facts = {"s": IndexFacts(GOOD.columns, 3, 0, False, "dictionary", "snappy")}  # 3 buckets, unsorted
    segment = seg("s", "2024-01-01", built_with=layout_record(layout(), 1))
    (plan,) = evaluate("t", [segment], upsert_table({}), NOW, index_facts=facts).plans
    assert plan.input_ids == ("s",), "rewritten whole for its order, its buckets kept"
    removed = upsert_table(
        {"skip_index_check": True}, columns={"ts": {"type": "timestamp"}, "k": {"type": "int"}}
    )
    evaluation = evaluate("t", [segment], removed, NOW)
    assert evaluation.plans == () and evaluation.decisions[0].reason is SkipReason.KEEPS_M_TO_1


RECORDS = (
    layout_record(layout(), 1),
    layout_record(layout(), 1),
    layout_record(layout(), 1),
    layout_record(layout(compression="gzip"), 1),
    layout_record(layout(sorted_column="k"), 1),
    None,  # no layout recorded
)
FACTS = (GOOD, GOOD, GOOD, replace(GOOD, sorted=False), replace(GOOD, bucket_count=2))


@st.composite
def refreshed_tables(draw: st.DrawFn) -> tuple[list[Segment], TableSettings, dict[str, IndexFacts] | None]:
    """Hourly segments over a few days (several share a day), each conforming or drifted, with
    sizes around the targets; a refresh rule with or without the index check, on a plain or an
    upsert table."""
    checked = draw(st.booleans())
    rule = {
        "max_records_per_segment": 10,
        "desired_segment_size": draw(st.sampled_from((300, 1000))),
        "max_records_per_task": draw(st.sampled_from((15, 40))),
        "table_max_num_tasks": draw(st.sampled_from((1, 3, 10))),
        "skip_index_check": not checked,
    }
    chosen = (upsert_table if draw(st.booleans()) else table)(rule)
    n = draw(st.integers(1, 24))
    hours = draw(st.lists(st.integers(0, 24 * 5), min_size=n, max_size=n, unique=True))
    segments, facts = [], {}
    for i, hour in enumerate(hours):
        start = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=hour)
        segments.append(
            Segment(
                f"s{i:02d}", "t", TimeRange(start, start + timedelta(hours=1)),
                loaded_at=start + timedelta(minutes=draw(st.integers(0, 6000))),
                records=draw(st.integers(0, 12)),
                bytes=draw(st.sampled_from((10, 100, 400, 900))),
                built_with=draw(st.sampled_from(RECORDS)),
            )
        )  # fmt: skip
        facts[segments[-1].id] = draw(st.sampled_from(FACTS))
    return segments, chosen, facts if checked else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(refreshed_tables())
def test_on_a_settled_table_a_refresh_near_a_new_segment_plans_what_a_full_one_plans(
    scenario: tuple[list[Segment], TableSettings, dict[str, IndexFacts] | None],
) -> None:
    """Settled: what full attempts would refresh is taken out until they plan nothing; then the
    last segment arrives, and the attempt near it plans what a full one plans."""
    segments, chosen, facts = scenario
    *before, new = segments
    catalog = TableSegments(before)
    while plans := evaluate("t", catalog.columns(), chosen, NOW, explain=False, index_facts=facts).plans:
        for sid in {sid for p in plans for sid in p.input_ids}:
            del catalog[sid]
    catalog[new.id] = new
    full = evaluate("t", catalog.columns(), chosen, NOW, explain=False, index_facts=facts)
    near = evaluate("t", catalog.columns(), chosen, NOW, explain=False, index_facts=facts, near=(new,))
    event(f"{min(len(full.plans), 2)}+ plans")
    assert near.plans == full.plans

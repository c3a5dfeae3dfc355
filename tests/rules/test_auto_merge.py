"""Seed 000 (Kylin auto-merge) worked examples and edge cases, exactly."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from compactor.catalog.changes import PlanApplied, SegmentAdded
from compactor.catalog.fold import SegmentCatalog
from compactor.config.rules import AutoMergeRule
from compactor.config.tables import TableSettings
from compactor.domain.calendar import Level
from compactor.domain.plans import MergePlan, SkipReason
from compactor.domain.segments import Segment, TimeRange
from compactor.rules import auto_merge
from compactor.rules.engine import evaluate
from tests.helpers.segments import day, hours, seg

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def settings(*levels: Level, **kw: object) -> TableSettings:
    return TableSettings(rules=(AutoMergeRule(rule="auto_merge", levels=levels),), **kw)  # type: ignore[arg-type]


def cascade(catalog: SegmentCatalog, table_settings: TableSettings) -> list[MergePlan]:
    """Attempt, apply, and attempt again (as the re-emitted events do) until quiet."""
    done: list[MergePlan] = []
    while True:
        plans = evaluate("t", catalog.segments("t"), table_settings, NOW).plans
        assert len(plans) <= 1, "auto_merge plans at most one merge per attempt"
        if not plans:
            return done
        catalog.apply(PlanApplied(plans[0], (plans[0].output,)))
        done.append(plans[0])


def layout(catalog: SegmentCatalog) -> list[tuple[str, str]]:
    return sorted(
        (s.start.date().isoformat(), (s.end - timedelta(days=1)).date().isoformat())
        for s in catalog.segments("t")
    )


def load(segments: Sequence[Segment]) -> SegmentCatalog:
    catalog = SegmentCatalog()
    for s in segments:
        catalog.apply(SegmentAdded(s))
    return catalog


def test_seed_example_1() -> None:
    cfg = settings(Level.WEEK, Level.MONTH)
    catalog = load(
        [
            seg("A", "2022-01-01", "2022-01-31"),
            seg("B", "2022-02-01", "2022-02-06"),
            seg("C", "2022-02-07", "2022-02-13"),
            seg("D", "2022-02-14", "2022-02-20"),
            seg("E", "2022-02-21", "2022-02-25"),
            seg("F", "2022-02-26"),
        ]
    )
    catalog.apply(SegmentAdded(seg("G", "2022-02-27")))
    first = cascade(catalog, cfg)
    assert [p.input_ids for p in first] == [("E", "F", "G")]
    assert first[0].level == "week"
    assert layout(catalog) == [
        ("2022-01-01", "2022-01-31"),
        ("2022-02-01", "2022-02-06"),
        ("2022-02-07", "2022-02-13"),
        ("2022-02-14", "2022-02-20"),
        ("2022-02-21", "2022-02-27"),
    ]
    catalog.apply(SegmentAdded(seg("H", "2022-02-28")))
    second = cascade(catalog, cfg)
    x = first[0].output.id
    assert [p.input_ids for p in second] == [("B", "C", "D", x, "H")]
    assert second[0].level == "month"
    assert layout(catalog) == [("2022-01-01", "2022-01-31"), ("2022-02-01", "2022-02-28")]


def test_seed_example_2_week_cut_at_year_end() -> None:
    cfg = settings(Level.WEEK)
    catalog = load([seg(n, f"2021-12-{d}") for n, d in zip("ABCDE", range(27, 32), strict=True)])
    catalog.apply(SegmentAdded(seg("F", "2022-01-01")))
    catalog.apply(SegmentAdded(seg("G", "2022-01-02")))
    plans = cascade(catalog, cfg)
    assert [p.input_ids for p in plans] == [("A", "B", "C", "D", "E"), ("F", "G")]
    assert layout(catalog) == [("2021-12-27", "2021-12-31"), ("2022-01-01", "2022-01-02")]


def test_a_gap_blocks_until_the_missing_segment_arrives() -> None:
    cfg = settings(Level.WEEK)
    days = [seg(f"d{i}", f"2024-01-0{i}") for i in range(1, 8) if i != 3]
    catalog = load(days)
    evaluation = evaluate("t", catalog.segments("t"), cfg, NOW)
    assert evaluation.plans == ()
    reasons = {d.segment_id: d.reason for d in evaluation.decisions}
    assert reasons["d1"] is SkipReason.INCOMPLETE_BUCKET
    assert reasons["d4"] is SkipReason.GAP
    catalog.apply(SegmentAdded(seg("d3", "2024-01-03")))
    assert [p.input_ids for p in cascade(catalog, cfg)] == [tuple(f"d{i}" for i in range(1, 8))]


def test_table_first_segment_anchors_a_partial_first_bucket() -> None:
    # The table starts on a Wednesday: Wed..Sun is all the week there is.
    catalog = load([seg(f"d{i}", f"2024-01-{i:02d}") for i in range(3, 8)])
    plans = cascade(catalog, settings(Level.WEEK))
    assert [p.input_ids for p in plans] == [("d3", "d4", "d5", "d6", "d7")]


def test_run_after_a_boundary_crossing_segment_merges() -> None:
    # X crosses the week boundary (Thu..Tue) so it is skipped; Wed..Sun follows it.
    catalog = load(
        [
            seg("a0", "2024-01-01", "2024-01-03"),
            seg("X", "2024-01-04", "2024-01-09"),
            *[seg(f"d{i}", f"2024-01-{i:02d}") for i in range(10, 15)],
        ]
    )
    plans = cascade(catalog, settings(Level.WEEK))
    assert [p.input_ids for p in plans] == [("d10", "d11", "d12", "d13", "d14")]


def test_segments_with_other_schema_version_do_not_merge_together() -> None:
    days = [seg(f"d{i}", f"2024-01-0{i}", schema_version=1 if i < 4 else 2) for i in range(1, 8)]
    evaluation = evaluate("t", days, settings(Level.WEEK), NOW)
    assert evaluation.plans == ()


def test_hour_level_merges_a_full_hourly_day() -> None:
    start = datetime(2024, 3, 31, tzinfo=UTC)
    catalog = load([hours(f"h{i:02d}", start + timedelta(hours=i)) for i in range(24)])
    plans = cascade(catalog, settings(Level.HOUR, Level.DAY))
    assert len(plans) == 1 and plans[0].level == "day"
    assert plans[0].output.range.start == start
    assert plans[0].output.range.end == start + timedelta(days=1)


def test_year_level_merges_months_of_a_leap_year() -> None:
    months = []
    for m in range(1, 13):
        begin = datetime(2024, m, 1, tzinfo=UTC)
        end = datetime(2024 + m // 12, m % 12 + 1, 1, tzinfo=UTC)
        months.append(Segment(f"m{m}", "t", range=TimeRange(begin, end), loaded_at=end))
    catalog = load(months)
    plans = cascade(catalog, settings(Level.MONTH, Level.QUARTER, Level.YEAR))
    assert [p.level for p in plans] == ["year"]
    assert plans[0].output.range.end == datetime(2025, 1, 1, tzinfo=UTC)


def test_disabled_merging_and_preserved_segments_are_untouched() -> None:
    days = [seg(f"d{i}", f"2024-01-0{i}") for i in range(1, 8)]
    disabled = evaluate("t", days, settings(Level.WEEK, merge_enabled=False), NOW)
    assert disabled.plans == ()
    assert {d.reason for d in disabled.decisions} == {SkipReason.MERGE_DISABLED}
    preserved = evaluate("t", days, settings(Level.WEEK, preserve_latest=1), NOW)
    assert preserved.plans == ()
    assert any(d.segment_id == "d7" and d.reason is SkipReason.PRESERVED for d in preserved.decisions)


def test_plan_ids_and_outputs_are_deterministic() -> None:
    days = [seg(f"d{i}", f"2024-01-0{i}", records=10, bytes=100) for i in range(1, 8)]
    a = evaluate("t", days, settings(Level.WEEK), NOW).plans[0]
    b = evaluate("t", list(reversed(days)), settings(Level.WEEK), NOW).plans[0]
    assert a == b
    assert a.output.id == f"m-{a.plan_id}"
    assert (a.output.records, a.output.bytes) == (70, 700)
    assert a.output.range.start == day("2024-01-01") and a.output.range.end == day("2024-01-08")


def test_a_load_straddling_the_week_boundary_closes_the_week_before_it() -> None:
    """Mon 04-01 .. Sat 04-06 loaded daily, then one load for Sun 04-07 to Tue 04-09: the straddler
    covers the rest of the week (as a month cuts a week), so the six days merge."""
    days = [seg(f"d{d}", f"2024-04-0{d}") for d in range(1, 7)]
    straddler = seg("sun-tue", "2024-04-07", "2024-04-08")
    rule = AutoMergeRule(rule="auto_merge", levels=(Level.WEEK,))
    outcome = auto_merge.plan([*days, straddler], rule, "t", days[0].range.start_ts)
    (merge,) = outcome.plans
    assert merge.input_ids == tuple(s.id for s in days)
    assert (merge.output.start, merge.output.end) == (day("2024-04-01"), day("2024-04-07"))
    (skipped,) = [d for d in outcome.decisions if d.segment_id == "sun-tue"]
    assert skipped.reason is SkipReason.AT_OR_ABOVE_THRESHOLD
    assert (
        "[2024-04-07T00:00:00+00:00, 2024-04-09T00:00:00+00:00) crosses the bucket boundary 2024-04-08"
        in skipped.detail
    )


def test_a_run_short_of_a_straddler_still_waits() -> None:
    """Monday to Friday, then a gap on Saturday, then the straddler: the week is not complete."""
    days = [seg(f"d{d}", f"2024-04-0{d}") for d in range(1, 6)]
    outcome = auto_merge.plan(
        [*days, seg("sun-tue", "2024-04-07", "2024-04-08")],
        AutoMergeRule(rule="auto_merge", levels=(Level.WEEK,)), "t", days[0].range.start_ts,
    )  # fmt: skip
    assert outcome.plans == ()
    assert {d.reason for d in outcome.decisions if d.segment_id.startswith("d")} == {
        SkipReason.INCOMPLETE_BUCKET
    }


def test_while_a_merge_of_the_table_runs_time_layers_wait_and_count_what_waits_as_debt() -> None:
    """Week 1 is merging; the rest of January arrives. A week merged now would be rewritten by
    the month, which takes the rest at once when week 1 is done: nothing is planned meanwhile."""
    days = [seg(f"d{d:02d}", f"2024-01-{d:02d}") for d in range(1, 32)]
    table_settings = settings(Level.WEEK, Level.MONTH)
    week_one = evaluate("t", days[:7], table_settings, NOW).plans[0]
    running = dict.fromkeys(week_one.input_ids, week_one.plan_id)
    evaluation = evaluate("t", days, table_settings, NOW, running=running)
    assert evaluation.plans == ()
    assert [p.level for p in evaluation.ready] == ["month"], "the month waits: it is debt"
    waits = {d.segment_id: d for d in evaluation.decisions if d.reason is SkipReason.ONE_MERGE_PER_ATTEMPT}
    assert set(waits) == {s.id for s in days}
    assert week_one.plan_id in waits[days[0].id].detail
    assert evaluate("t", days, table_settings, NOW).plans[0].level == "month"

"""The write-amplification budget: optional merges wait once it is spent, required ones never."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from compactor.config.loading import load_config
from compactor.config.rules import AutoMergeRule, BinPackRule, MajorRule, MinorRule
from compactor.domain.calendar import Level
from compactor.domain.plans import SkipReason, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.rules.budget import WINDOW_SLOTS, SlidingTotals, WriteLedger, admit, optional
from compactor.rules.engine import evaluate
from compactor.rules.simulation import Simulation

START = datetime(2024, 4, 1, tzinfo=UTC)  # a Monday; April has 30 days
MB = 1 << 20


def hour(h: int, size: int = 64 * MB) -> Segment:
    start = START + timedelta(hours=h)
    end = start + timedelta(hours=1)
    return Segment(f"h{h:04d}", "t", TimeRange(start, end), loaded_at=end, bytes=size)


def test_which_merges_are_optional() -> None:
    layers = AutoMergeRule(rule="auto_merge", levels=(Level.DAY, Level.WEEK, Level.MONTH))
    two = [hour(0), hour(1)]
    assert not optional(make_plan("t", "auto_merge", two, level="day"), layers), "the smallest level"
    assert optional(make_plan("t", "auto_merge", two, level="week"), layers)
    minor = MinorRule(rule="minor")
    assert not optional(make_plan("t", "minor", two, level="level-1"), minor)
    assert optional(make_plan("t", "minor", two, level="level-2"), minor)
    pools = BinPackRule(rule="bin_pack")
    assert not optional(make_plan("t", "bin_pack", two, pool="small"), pools), "the first pool"
    assert optional(make_plan("t", "bin_pack", two, pool="large"), pools)
    assert not optional(make_plan("t", "major", two), MajorRule(rule="major"))


def test_optional_merges_run_while_their_bytes_fit_required_ones_always() -> None:
    layers = AutoMergeRule(rule="auto_merge", levels=(Level.DAY, Level.WEEK))
    week = make_plan("t", "auto_merge", [hour(0), hour(1)], level="week")  # 128 MB
    day = make_plan("t", "auto_merge", [hour(2), hour(3)], level="day")
    admitted = admit([week, day], layers, allowance=100 * MB)
    assert (admitted.kept, admitted.deferred, admitted.allowance) == ([day], [week], -28 * MB)
    assert admit([week, day], layers, allowance=300 * MB).kept == [week, day]


def test_the_ledger_measures_over_its_window() -> None:
    ledger = WriteLedger(window=timedelta(days=1))
    assert ledger.allowance("t", START, None) is None, "no budget"
    ledger.ingested("t", START, 100)
    ledger.rewritten("t", START, 150)
    assert ledger.amplification("t", START) == 1.5
    assert ledger.allowance("t", START, 2.0) == 50
    later = START + timedelta(days=1, minutes=2)  # kept in buckets of 2 minutes (a day / 720)
    ledger.rewritten("t", later, 10)
    assert math.isinf(ledger.amplification("t", later)), "rewritten with nothing ingested in the window"
    assert ledger.allowance("t", later, 2.0) == -10


def test_a_window_holds_its_buckets_not_its_entries() -> None:
    """However many loads, a window keeps at most `WINDOW_SLOTS` + 1 buckets of a table."""
    totals = SlidingTotals(timedelta(days=30))
    for minute in range(0, 60 * 24 * 45, 7):  # 45 days of a load every 7 minutes
        totals.add("t", START + timedelta(minutes=minute), 1)
        assert totals.buckets("t") <= WINDOW_SLOTS + 1
    now = START + timedelta(days=45)
    expected = len(range(0, 60 * 24 * 45, 7)) - len(range(0, 60 * 24 * 15, 7))  # the last 30 days'
    assert expected <= totals.count("t", now) <= expected + 60 // 7 + 1, "within one hour's bucket"
    assert totals.total("t", now) == totals.count("t", now)
    assert totals.count("t", now + timedelta(days=31)) == 0 and totals.buckets("t") == 0


def test_on_the_benchmarks_load_the_budget_holds_and_every_day_still_merges() -> None:
    """bench/write_amplification.py's month of hourly 64 MB loads, time layers [day, week,
    month]: without a budget 2.77x; with 1.5, no more than 1.5x, every hour merged, and never
    more segments than a month of days plus a day of hours."""
    config = load_config(
        {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["day", "week", "month"]}],
                      "max_write_amplification": 1.5}}
    )  # fmt: skip
    sim = Simulation(config)
    most = 0
    for h in range(30 * 24):
        sim.arrive(hour(h))
        most = max(most, len(sim.catalog.segments("t")))
    ingested = 30 * 24 * 64 * MB
    rewritten = sum(p.bytes_in for p in sim.merges)
    assert rewritten / ingested <= 1.5
    assert all(s.range.duration > timedelta(hours=1) for s in sim.catalog.segments("t")), "every hour merged"
    assert most <= 30 + 24
    assert {p.level for p in sim.merges} == {"day", "week"}, "the month merge would overspend"


def test_explain_says_a_merge_waits_for_the_budget() -> None:
    config = load_config(
        {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["day", "week"]}]}}
    ).for_table("t")
    week = [hour(h) for h in range(7 * 24)]
    evaluation = evaluate("t", week, config, START + timedelta(days=8), allowance=0)
    (plan,) = evaluation.plans
    assert plan.level == "day", "the week waits; a day merges instead"
    reasons = {d.segment_id: d.reason for d in evaluation.decisions}
    assert reasons["h0000"] is None and reasons["h0024"] is SkipReason.WA_BUDGET
    unbudgeted = evaluate("t", week, config, START + timedelta(days=8))
    assert unbudgeted.plans[0].level == "week"

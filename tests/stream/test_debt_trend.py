"""Merge debt as a service level: drain rate, ETA, the stuck detector and the objective."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from compactor.config.loading import load_config
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.observe.status.table_status import render, table_status
from compactor.rules.engine import evaluate
from compactor.rules.simulation import Simulation
from compactor.stream.debt_trend import DebtTrend, Objective, Reading, drain_rate, is_stuck, objective
from tests.helpers.harness import Harness

T0 = datetime(2024, 1, 1, tzinfo=UTC)
MB = 1 << 20


def readings(*values: int, every: timedelta = timedelta(minutes=1), keeping_up: bool = True) -> list[Reading]:
    return [Reading(T0 + every * i, v, v // MB, keeping_up) for i, v in enumerate(values)]


def test_the_drain_rate_is_the_net_fall_per_hour() -> None:
    falling = readings(600 * MB, 500 * MB, 400 * MB, 300 * MB)  # 100 MB a minute
    assert drain_rate(falling) == pytest.approx(6000 * MB)
    assert drain_rate(readings(300 * MB, 400 * MB)) == pytest.approx(-6000 * MB), (
        "a rising debt drains negatively"
    )
    assert drain_rate(readings(5 * MB)) == 0.0, "one reading says nothing"
    trend = DebtTrend()
    for r in falling:
        trend.add("t", r)
    outlook = trend.outlook("t", ingest_bytes_per_hour=600 * MB)
    assert outlook is not None
    assert outlook.eta is not None
    assert outlook.eta.total_seconds() == pytest.approx(180), "300 MB left at 100 MB a minute"
    assert outlook.ingest_hours == 0.5 and outlook.objective is None


def test_readings_older_than_the_window_do_not_count() -> None:
    trend = DebtTrend(window=timedelta(minutes=2))
    for r in readings(0, 900 * MB, 100 * MB, 100 * MB, 100 * MB):  # a spike, then flat
        trend.add("t", r)
    outlook = trend.outlook("t", 0.0)
    assert outlook is not None and outlook.drain_bytes_per_hour == 0.0 and outlook.eta is None
    assert math.isinf(outlook.ingest_hours), "debt and no ingest to measure it by"


def test_a_table_keeps_the_readings_of_its_window_and_the_stuck_detectors_not_more() -> None:
    trend = DebtTrend(window=timedelta(minutes=15), stuck_after=10)
    for r in readings(*[50 * MB] * 600):  # ten hours, one reading a minute
        trend.add("t", r)
    kept = trend.readings("t")
    assert len(kept) == 16 and kept[-1].at - kept[0].at == timedelta(minutes=15), "the window's"
    outlook = trend.outlook("t", 0.0)
    assert outlook is not None and outlook.stuck

    trend = DebtTrend(window=timedelta(minutes=15), stuck_after=10)
    for r in readings(*[50 * MB] * 100, every=timedelta(hours=1)):  # far apart: the detector's ten
        trend.add("t", r)
    assert len(trend.readings("t")) == 10
    outlook = trend.outlook("t", 0.0)
    assert outlook is not None and outlook.stuck


def test_a_debt_that_does_not_fall_while_the_job_keeps_up_is_stuck() -> None:
    assert is_stuck(readings(*[50 * MB] * 10), after=10)
    assert is_stuck(readings(*[50 * MB] * 5, *[60 * MB] * 5), after=10), "rising is not falling"
    assert not is_stuck(readings(*[50 * MB] * 9), after=10), "not for long enough"
    assert not is_stuck(readings(*[50 * MB] * 9, 40 * MB), after=10), "it fell"
    assert not is_stuck(readings(*[0] * 10), after=10), "no debt"
    assert not is_stuck(readings(*[50 * MB] * 10, keeping_up=False), after=10), "the job is behind: no room"


def test_the_objective_is_met_at_risk_or_breached() -> None:
    two_hours, soon = timedelta(hours=2), timedelta(minutes=30)
    assert objective(2.5, soon, False, two_hours) is Objective.BREACHED
    assert objective(1.5, soon, False, two_hours) is Objective.AT_RISK, "over half of it"
    assert objective(0.5, soon, False, two_hours) is Objective.MET
    assert objective(0.5, None, False, two_hours) is Objective.AT_RISK, "not falling"
    assert objective(0.5, timedelta(hours=3), False, two_hours) is Objective.AT_RISK, "paid too late"
    assert objective(0.5, soon, True, two_hours) is Objective.AT_RISK, "stuck"
    assert objective(0.0, None, False, two_hours) is Objective.MET, "no debt"


def hour(h: int) -> Segment:
    start = T0 + timedelta(hours=h)
    return Segment(f"h{h:04d}", "t", TimeRange(start, start + timedelta(hours=1)), start, bytes=64 * MB)


def test_a_pause_raises_the_debt_and_the_eta_predicts_when_it_is_paid() -> None:
    """Hourly 64 MB loads into day layers. Merges pause for eight days: the debt rises. Then
    the job merges once every four hours: the debt drains, new days still adding to it. Twelve
    hours after the restart, the ETA is within 20% of when the debt is actually paid."""
    config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["day"]}]}})
    sim, trend = Simulation(config), DebtTrend(window=timedelta(hours=12))
    paused, resumed = range(24, 9 * 24), 9 * 24
    predicted_at, eta, paid_at = None, None, None
    for h in range(24 * 14):
        now = T0 + timedelta(hours=h + 1)
        sim.catalog.add(hour(h))
        evaluation = evaluate("t", sim.catalog.columns("t"), config.for_table("t"), now, explain=False)
        ready = list(evaluation.ready)
        if h not in paused and h % 4 == 0 and evaluation.plans:
            sim.catalog.apply(evaluation.plans[0])
            ready.remove(evaluation.plans[0])
        debt = sum(p.bytes_in for p in ready)
        trend.add("t", Reading(now, debt, sum(len(p.inputs) for p in ready)))
        if h == resumed - 1:
            peak = debt
            during = [r.bytes for r in trend.readings("t") if r.at > T0 + timedelta(hours=paused.start + 1)]
            rising = all(b >= a for a, b in pairwise(during)) and during[-1] > during[0]
        if h == resumed + 12:
            outlook = trend.outlook("t", 64 * MB)
            assert outlook is not None and outlook.eta is not None
            predicted_at, eta = now, outlook.eta
        if predicted_at is not None and paid_at is None and debt == 0:
            paid_at = now
    assert peak >= 8 * 24 * 64 * MB, "eight days of loads waited"
    assert rising, "the debt rose while merges paused"
    assert predicted_at is not None and eta is not None and paid_at is not None
    measured = paid_at - predicted_at
    assert measured >= timedelta(hours=12)
    assert abs(eta - measured) <= 0.2 * measured, (eta, measured)


def test_the_stream_reports_a_debt_that_stopped_falling(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A merge that keeps failing leaves its segments waiting while events flow: after ten
    readings the table is stuck (one warning, the metric), at risk of its objective, and the
    next full evaluation keeps that outlook with the table's mark for `compactor status`."""
    harness.store.create("t")
    minor = {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}], "max_debt": "24h"}
    handler = harness.handler({"defaults": minor})
    loads = [replace(harness.day(i), bytes=100 * MB) for i in range(14)]
    failing = make_plan("t", "minor", loads[:3], output_level=1).plan_id
    harness.store.failures[failing] = RuntimeError("disk full")
    for segment in loads[:12]:  # the first three fail and cool down; the others merge by three
        handler.process(harness.loaded(segment))
    metrics = handler.metrics.registry
    assert metrics.get_sample_value("compactor_debt_stuck", {"table": "t"}) == 1.0
    assert caplog.text.count("merge debt has not fallen for 10 evaluations") == 1
    assert metrics.get_sample_value("compactor_debt_objective", {"table": "t", "state": "at_risk"}) == 1.0
    assert metrics.get_sample_value("compactor_debt_eta_seconds", {"table": "t"}) == math.inf

    harness.clock.now += timedelta(seconds=61)  # the next attempt evaluates in full
    handler.process(harness.loaded(loads[12]))
    kept = handler.catalog.debt_outlook("t")
    assert kept is not None
    doc = json.loads(kept)
    assert (doc["debt_segments"], doc["debt_bytes"], doc["stuck"], doc["objective"]) == (
        3, 300 * MB, True, "at_risk",
    )  # fmt: skip
    line = render(table_status("t", True, loads, (), (), debt=kept))
    assert "merge debt (the job, at " in line and "3 segment(s), 314572800 bytes" in line
    assert "not falling; objective at_risk; STUCK" in line

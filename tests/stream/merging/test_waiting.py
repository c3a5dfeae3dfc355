"""Deficit round-robin across tables: every table with debt within N rounds, shares by weight;
what an attempt that looked at part of a table does to the plans it left waiting."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.domain.plans import MergePlan, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.stream.merging.waiting import FairShare, WaitingPlans

WEIGHTS = st.dictionaries(
    st.sampled_from([f"t{i}" for i in range(8)]),
    st.one_of(st.just(0.0), st.floats(1e-6, 1.0), st.floats(1.0, 1000.0)),
    min_size=1,
)


@settings(max_examples=300, deadline=None)
@given(WEIGHTS)
def test_every_table_with_debt_is_served_within_n_rounds(weights: dict[str, float]) -> None:
    fair, served_in = FairShare(), {}
    while len(served_in) < len(weights):
        table = fair.pick(weights)
        served_in.setdefault(table, fair.rounds)
    assert max(served_in.values()) <= len(weights) - 1, served_in  # rounds completed before


@settings(max_examples=200, deadline=None)
@given(WEIGHTS, st.integers(5, 40))
def test_over_many_rounds_tables_are_served_by_their_quantum(weights: dict[str, float], rounds: int) -> None:
    fair, served = FairShare(), dict.fromkeys(weights, 0)
    while fair.rounds < rounds:
        served[fair.pick(weights)] += 1
    top, floor = max(weights.values()), 1 / len(weights)
    for table, weight in weights.items():
        quantum = max(weight / top if top > 0 else 0.0, floor)
        assert math.floor(quantum * rounds) - 1 <= served[table] <= math.ceil(quantum * (rounds + 1)) + 1


def test_the_heaviest_table_runs_every_round_and_a_light_one_still_runs() -> None:
    fair = FairShare()
    picks = [fair.pick({"big": 100.0, "small": 1.0}) for _ in range(6)]
    assert picks.count("big") == 4 and picks.count("small") == 2


def quarter(n: int) -> MergePlan:
    """A plan of the three segments of quarter `n`."""
    first = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=90 * n)
    inputs = [
        Segment(f"q{n}d{d}", "t", TimeRange(first + timedelta(days=d), first + timedelta(days=d + 1)), first)
        for d in range(3)
    ]
    return make_plan("t", "auto_merge", inputs, level="quarter")


def test_an_attempt_near_an_event_adds_to_the_waiting_plans_and_a_whole_one_replaces_them() -> None:
    waiting = WaitingPlans(priority=lambda table: 1.0)
    q0, q1, q2 = quarter(0), quarter(1), quarter(2)
    waiting.offer("t", [q2])
    waiting.offer("t", [q0], whole=False)
    assert waiting.waiting("t") == [q0, q2], "the plan far from the event still waits"
    waiting.offer("t", [], whole=False)
    assert waiting.waiting("t") == [q0, q2], "an attempt that found nothing near drops nothing"
    overlapping = make_plan("t", "auto_merge", [*q0.inputs, *q1.inputs], level="quarter")
    waiting.offer("t", [overlapping], whole=False)
    assert waiting.waiting("t") == [overlapping, q2], "a new plan takes over the inputs of a waiting one"
    waiting.drop_taking("t", [q2.input_ids[1]])
    assert waiting.waiting("t") == [overlapping], "a plan whose inputs were merged away is dropped"
    waiting.offer("t", [q1])
    assert waiting.waiting("t") == [q1], "the whole table's latest plans replace the rest"
    waiting.offer("t", [])
    assert waiting.waiting("t") == []

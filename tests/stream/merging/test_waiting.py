"""Deficit round-robin across tables: every table with debt within N rounds, shares by weight."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.stream.merging.waiting import FairShare

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

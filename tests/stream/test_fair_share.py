"""Deficit round-robin across tables: every table with debt within N rounds, shares by weight."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.domain.events import MergeStatus
from compactor.stream.fair_share import FairShare
from tests.helpers.harness import Harness
from tests.stream.test_admission import request

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


def test_a_batch_merge_limit_is_shared_across_tables_by_priority(harness: Harness) -> None:
    """Three tables complete a week in one batch; one merge a batch: the high-priority table's
    first, then the others, one per batch, each batch started by the last merge's own event."""
    config = {
        "defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]},
        "tables": {"c": {"priority": 10}},
        "operations": {"max_merges_per_batch": 1},
    }
    for table in "abc":
        harness.store.create(table)
    handler = harness.handler(config)
    handler.process([e for t in "abc" for e in harness.loaded(*(harness.day(i, table=t) for i in range(7)))])
    merged = [r["table"] for r in harness.results()]
    assert merged == ["c"], "one merge in the batch: the table with priority"
    for _ in range(2):  # the merge's own completion event starts the next batch
        handler.process([harness.envelope(harness.publisher.on("segments")[-1][2])])
    assert [r["table"] for r in harness.results()] == ["c", "a", "b"]
    assert harness.statuses() == [MergeStatus.SUCCEEDED] * 3


def test_an_operators_request_is_not_held_back_by_the_limit(harness: Harness) -> None:
    """The limit is for the merges events trigger; a requested rule runs at once."""
    week = {"rule": "auto_merge", "levels": ["week"]}
    config = {"defaults": {"rules": [week]}, "tables": {"t": {"rules": [week | {"trigger": "manual"}]}},
              "operations": {"max_merges_per_batch": 1}}  # fmt: skip
    for table in "tu":
        harness.store.create(table)
    handler = harness.handler(config)
    handler.process(harness.loaded(*(harness.day(i) for i in range(7))))
    assert harness.results() == [], "t's rule runs only when asked"
    batch = [
        *harness.loaded(*(harness.day(i, table="u") for i in range(7))),
        request(harness, rule="auto_merge"),
    ]
    handler.process(batch)
    assert sorted(r["table"] for r in harness.results()) == ["t", "u"], (
        "the request, and u's merge within the limit"
    )

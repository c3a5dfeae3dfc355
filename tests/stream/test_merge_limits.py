"""A batch's merge limit (`operations.max_merges_per_batch`) on the stream: shared across tables
by priority, and never holding back an operator's request."""

from __future__ import annotations

from compactor.domain.events import MergeStatus
from tests.helpers.harness import Harness
from tests.stream.test_admission import request


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
    config = {
        "defaults": {"rules": [week]},
        "tables": {"t": {"rules": [week | {"trigger": "manual"}]}},
        "operations": {"max_merges_per_batch": 1},
    }
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

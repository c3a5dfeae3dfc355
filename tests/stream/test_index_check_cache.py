"""The planner checks a segment's index once while it lives, per table, and forgets merged-away ones."""

from __future__ import annotations

from compactor.domain.events import MergeStatus
from compactor.domain.plans import make_plan
from tests.helpers.harness import Harness

LAYOUT = {
    "time_column": "ts",
    "bucket_time_period": "1d",
    "columns": {"ts": {"type": "timestamp"}, "v": {"type": "string"}},
}
# on load, index check on: small conforming segments of one day merge
REFRESH = {"defaults": {"layout": LAYOUT, "rules": [{"rule": "refresh"}]}}


def test_a_segments_index_check_is_done_once_per_table_and_dropped_once_it_is_merged_away(
    harness: Harness,
) -> None:
    harness.store.create("t")
    harness.store.create("u")
    handler = harness.handler(REFRESH)
    outputs = {}
    for table in ("t", "u"):  # the same segment ids in both tables
        a, b = harness.day(0, "a", table=table), harness.day(0, "b", table=table)
        handler.process(harness.loaded(a))  # alone in its day: it conforms, nothing to merge
        handler.process(harness.loaded(b))  # a's facts (cached) and b's: the day's two merge
        outputs[table] = make_plan(table, "refresh", [a, b], allow_single=True).output.id
        merged = harness.publisher.on("segments")[-1]  # the merge's completion event comes back
        handler.process([harness.envelope(merged[2], key=table)])  # an attempt near the output

    assert harness.statuses() == [MergeStatus.SUCCEEDED, MergeStatus.SUCCEEDED]
    assert harness.store.index_checks == [
        ("t", "a"),
        ("t", "b"),
        ("t", outputs["t"]),
        ("u", "a"),  # not t's answer for its segment "a"
        ("u", "b"),
        ("u", outputs["u"]),
    ], "each segment checked once, for its own table, though attempts read a's facts twice"
    # the planner's cache (private): per table, only segments still live
    facts = handler.planner._facts
    for table in ("t", "u"):
        assert {sid for sid, _ in facts[table]} == {outputs[table]} == set(handler.catalog.live(table))

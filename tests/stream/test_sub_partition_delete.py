"""Deleting a sub-partition value through the stream: one commit, the catalog follows, merges resume."""

from __future__ import annotations

from dataclasses import replace

from compactor.domain.events import CompactionRequested
from compactor.domain.segments import SegmentState
from tests.helpers.harness import DAY, Harness

REGIONS = {
    "defaults": {
        "rules": [{"rule": "auto_merge", "levels": ["week"]}],
        "sub_partition": {"column": "region", "values": ["eu", "us"]},
    }
}


def delete(h: Harness, value: str) -> list:  # type: ignore[type-arg]
    request = CompactionRequested("r-delete", "t", DAY, delete_sub_partition=value)
    return [h.envelope(h.codec.encode_compaction_requested(request))]


def test_a_value_leaves_every_segment_in_one_commit_and_the_week_then_merges(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(REGIONS)
    week = [replace(harness.day(n), sub_partitions=frozenset({"eu", "us"})) for n in range(6)]
    week.append(replace(harness.day(6), sub_partitions=frozenset({"us"})))  # Sunday has only 'us'
    handler.process(harness.loaded(*week))
    assert harness.results() == [], "Sunday's set differs: the week waits"
    commits = len(harness.store.commits["t"])

    handler.process(delete(harness, "eu"))

    delete_commits = harness.store.commits["t"][commits:]
    assert [c.op for c in delete_commits] == ["sub_partition_delete", "merge"]
    assert delete_commits[0].added and not delete_commits[0].removed
    assert len(delete_commits[0].added) == 6, "the six segments that held eu; Sunday is untouched"
    (merged,) = handler.catalog.segments("t")
    assert merged.sub_partitions == frozenset({"us"}) and merged.records == 6 * 5 + 10
    assert harness.store.rows["t"] == {merged.id: 40}


def test_segments_left_without_any_value_leave_the_catalog(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(REGIONS)
    only_eu = replace(harness.day(0), sub_partitions=frozenset({"eu"}))
    both = replace(harness.day(1), sub_partitions=frozenset({"eu", "us"}))
    handler.process(harness.loaded(only_eu, both))
    handler.process(delete(harness, "eu"))
    assert [(s.id, sorted(s.sub_partitions), s.records) for s in handler.catalog.segments("t")] == [
        ("d01", ["us"], 5)
    ]
    assert handler.catalog.retired("t", "d00")
    restarted = harness.handler(REGIONS)  # the commit's record rebuilds the same catalog
    assert restarted.catalog.segments("t") == handler.catalog.segments("t")


def test_a_value_being_built_refuses_the_delete_and_the_table_cools_down(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(REGIONS)
    loading = replace(
        harness.day(0),
        sub_partitions=frozenset({"eu", "us"}),
        sub_partition_states=(("eu", SegmentState.LOADING),),
    )
    handler.process(harness.loaded(loading))
    commits = len(harness.store.commits["t"])
    handler.process(delete(harness, "eu"))
    assert len(harness.store.commits["t"]) == commits, "nothing deleted"
    assert handler.stats.attempt_errors == 1


def test_a_table_without_sub_partitions_dead_letters_the_request(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler({"defaults": {"rules": [{"rule": "auto_merge"}]}})
    handler.process(delete(harness, "eu"))
    ((reason, detail),) = harness.dead()
    assert reason == "invalid_value" and "declares no sub-partition column" in detail and "'eu'" in detail

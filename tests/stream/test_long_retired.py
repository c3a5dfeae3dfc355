"""Segments merged away long ago, whose records the catalog no longer keeps in memory: their
events are still told apart by the durable store (bounded over years, DESIGN 17)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compactor.catalog import fold
from compactor.codec.events import default_codec
from compactor.domain.events import SegmentCompleted
from tests.helpers.harness import DAY, Harness

WEEKS = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}


def test_a_re_delivered_load_merged_away_long_ago_is_recognised_from_the_store(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "RETIRED_KEPT", 3)
    harness.store.create("t")
    handler = harness.handler(WEEKS)
    days = [harness.day(n) for n in range(21)]
    first = harness.loaded(*days[:7])
    handler.process(first)
    handler.process(harness.loaded(*days[7:]))  # two more weeks merge: the first's records leave
    assert len(harness.statuses()) == 3
    assert len(handler.catalog.retired_ids("t")) == 3, "memory keeps the newest records only"
    assert not handler.catalog.retired("t", "d00")

    handler.process(first)  # the first week's loads, delivered again
    assert harness.dead() == [] and handler.admission.redelivered == 7
    codec = default_codec()
    reused = replace(days[0], records=days[0].records + 1)  # the id reused for other rows
    handler.process([harness.envelope(codec.encode_segment_completed(SegmentCompleted(reused, DAY)))])
    assert [reason for reason, _ in harness.dead()] == ["duplicate_segment_id"]
    assert len(handler.catalog.segments("t")) == 3


def test_a_re_delivered_sub_partition_event_of_a_segment_merged_away_long_ago_is_not_dead_lettered(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compactor.domain.events import SegmentAction

    monkeypatch.setattr(fold, "RETIRED_KEPT", 3)
    harness.store.create("t")
    handler = harness.handler(WEEKS)
    days = [harness.day(n) for n in range(21)]
    handler.process(harness.loaded(*days))
    assert not handler.catalog.retired("t", "d00"), "its record left memory"
    codec = default_codec()
    added = SegmentCompleted(
        replace(days[0], sub_partitions=frozenset({"eu"})), DAY, action=SegmentAction.ADD_SUB_PARTITION
    )
    handler.process([harness.envelope(codec.encode_segment_completed(added))])
    assert harness.dead() == [], "a re-delivery of a segment merged away, told by the store"

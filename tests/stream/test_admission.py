"""Admission: every kind of bad event becomes a dead letter with its reason; valid ones are recorded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from compactor.codec.events import SEGMENT_COMPLETED
from compactor.codec.framing import MAGIC
from compactor.domain.clock import now_utc
from compactor.domain.events import (
    CompactionRequested,
    ConfigApplied,
    MergeResult,
    MergeStatus,
    SegmentAction,
    SegmentCompleted,
)
from compactor.domain.plans import make_plan
from compactor.domain.segments import TimeRange
from compactor.errors import DeadLetterReason
from compactor.stream.triggers import Envelope
from tests.helpers.harness import DAY, Harness

WEEKS = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}


def raw(h: Harness, **changes: Any) -> Envelope:
    """A SegmentCompleted record encoded as-is, with what Avro cannot refuse."""
    record = {
        "table": "t", "segment_id": "x", "start": DAY, "end": DAY + timedelta(days=1), "sub_partitions": [],
        "records": 1, "bytes": 1, "origin": "LOAD", "loaded_at": DAY, "produced_at": DAY,
    } | changes  # fmt: skip
    return h.envelope(h.codec.encode(SEGMENT_COMPLETED, record))


def completed(h: Harness, segment: Any, action: SegmentAction = SegmentAction.CREATE) -> Envelope:
    return h.envelope(h.codec.encode_segment_completed(SegmentCompleted(segment, DAY, action=action)))


def request(h: Harness, rule: str | None = None, ids: tuple[str, ...] = ()) -> Envelope:
    return h.envelope(h.codec.encode_compaction_requested(CompactionRequested("r1", "t", DAY, rule, ids)))


def merge_result(h: Harness) -> Envelope:
    plan = make_plan("t", "auto_merge", [h.day(0), h.day(1)])
    return h.envelope(
        h.codec.encode_merge_result(MergeResult.unsuccessful(plan, MergeStatus.FAILED, "x", DAY))
    )


def loaded_then(bad: Callable[[Harness], Envelope]) -> Callable[[Harness], list[Envelope]]:
    """d00 is loaded and announced first; then the bad event."""
    return lambda h: [*h.loaded(h.day(0)), bad(h)]


SCENARIOS: dict[DeadLetterReason, Callable[[Harness], list[Envelope]]] = {
    DeadLetterReason.UNDECODABLE: lambda h: [h.envelope(b"not avro at all")],
    DeadLetterReason.UNKNOWN_SCHEMA: lambda h: [h.envelope(MAGIC + b"\x01" * 8 + b"\x00")],
    DeadLetterReason.WRONG_EVENT_TYPE: lambda h: [merge_result(h)],
    DeadLetterReason.MISSING_FIELD: lambda h: [raw(h, segment_id="")],
    DeadLetterReason.INVALID_TABLE_NAME: lambda h: [raw(h, table="../../etc")],
    DeadLetterReason.INVALID_RANGE: lambda h: [raw(h, end=DAY)],
    DeadLetterReason.INVALID_VALUE: lambda h: [raw(h, segment_id="no spaces allowed")],
    DeadLetterReason.UNKNOWN_TABLE: lambda h: [completed(h, h.day(0, table="nope"))],
    # the handler runs one shard, which does not own "theirs" (see below)
    DeadLetterReason.WRONG_PARTITION: lambda h: [completed(h, h.day(0, table="theirs"))],
    DeadLetterReason.OVERLAPPING_RANGE: lambda h: [
        *h.loaded(h.day(0)),
        *h.loaded(h.day(0, sid="wide", days=2)),
    ],
    DeadLetterReason.DUPLICATE_SEGMENT_ID: loaded_then(lambda h: completed(h, replace(h.day(0), records=99))),
    DeadLetterReason.ROWS_NOT_IN_DELTA: lambda h: [completed(h, h.day(5, sid="ghost"))],
    DeadLetterReason.UNKNOWN_SEGMENT: lambda h: [
        completed(h, h.day(3, sid="unknown"), SegmentAction.ADD_SUB_PARTITION)
    ],
    DeadLetterReason.RANGE_MISMATCH: loaded_then(
        lambda h: completed(
            h,
            replace(h.day(0), range=TimeRange(DAY, DAY + timedelta(days=2))),
            SegmentAction.ADD_SUB_PARTITION,
        )
    ),
    DeadLetterReason.MANUAL_MERGE_REJECTED: loaded_then(lambda h: request(h, ids=("d00", "ghost"))),
    DeadLetterReason.UNKNOWN_RULE: lambda h: [request(h, rule="major")],
    DeadLetterReason.INVALID_CONFIG: lambda h: [
        h.envelope(h.codec.encode_config_applied(ConfigApplied("t", 2, '{"preserve_latest": -1}', now_utc())))
    ],
}


def test_every_dead_letter_reason_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(DeadLetterReason)


@pytest.mark.parametrize("reason", list(SCENARIOS), ids=str)
def test_each_bad_event_is_dead_lettered_with_its_reason_and_the_good_ones_are_not(
    harness: Harness, reason: DeadLetterReason
) -> None:
    harness.store.create("t")
    harness.store.create("theirs")
    handler = harness.handler(WEEKS)
    handler.admission.tables.owns = lambda table: table != "theirs"  # as a shard's job
    envelopes = SCENARIOS[reason](harness)
    good = harness.loaded(harness.day(10, sid="good"))  # a valid event in the same batch
    handler.process([*envelopes, *good])

    dead = harness.dead()
    assert [r for r, _ in dead] == [str(reason)]
    assert dead[0][1], "the detail says what is wrong"
    assert harness.publisher.on("dead")[0][2] == envelopes[-1].value, "the original bytes are kept"
    assert handler.catalog.get("t", "good") is not None
    assert handler.stats.dead_letters == 1


def test_a_re_delivered_event_is_harmless(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(WEEKS)
    events = harness.loaded(harness.day(0))
    handler.process(events)
    handler.process(events)
    assert harness.dead() == [] and [s.id for s in handler.catalog.segments("t")] == ["d00"]


def test_a_request_for_a_configured_rule_runs_it_whatever_its_trigger(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler({"defaults": {"rules": [{"rule": "major", "trigger": "manual"}]}})
    handler.process(harness.loaded(harness.day(0), harness.day(1)))
    assert harness.results() == [], "manual rules do not run on load"
    handler.process([request(harness, rule="major")])
    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    assert handler.stats.attempts_by_origin == {"load": 2, "request": 1}


def test_with_sealing_a_load_overlapping_a_bucket_is_late_data_and_one_across_buckets_is_refused(
    harness: Harness,
) -> None:
    harness.store.create("t")
    rule = {"rule": "auto_merge", "levels": ["week"], "sealing": {"late_fold_ratio": 0.5}}
    handler = harness.handler({"defaults": {"rules": [rule]}})
    handler.process(harness.loaded(*(harness.day(n) for n in range(8))))  # week 1 merges, week 2 begins
    handler.process(harness.loaded(harness.day(2, sid="late")))  # Wednesday again: late for week 1
    handler.process(harness.loaded(harness.day(6, sid="across", days=2)))  # Sunday into Monday
    assert [(reason, detail.split("; ")[-1]) for reason, detail in harness.dead()] == [
        (
            "overlapping_range",
            "a late load must lie within one week bucket, and it crosses 2024-01-08T00:00:00+00:00",
        )
    ]
    held = {s.id for s in handler.catalog.segments("t")}
    assert "late" in held and "across" not in held
    assert [r["level"] for r in harness.results()] == ["week"], "one late day of seven is under 50 %"

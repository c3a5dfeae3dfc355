"""The announcer: result first, then the outputs' events, then the version remembered; nothing
a crash leaves unsaid stays unsaid; a delivery failure fails the batch."""

from __future__ import annotations

import pytest

from compactor.config.loading import load_config
from compactor.domain.events import MergeResult, MergeStatus
from compactor.domain.plans import make_plan
from compactor.domain.segments import Origin
from compactor.errors import DeliveryError
from tests.helpers.harness import Harness

MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [2, 0]}]}}


def test_a_merge_is_announced_result_first_then_its_output_then_remembered(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(harness.day(0), harness.day(1)))

    topics = [m[0] for m in harness.publisher.sent]
    assert topics == ["results", "segments"]
    (result,) = harness.results()
    (event,) = harness.re_emitted()
    assert result["status"] is MergeStatus.SUCCEEDED and result["data_change"] is False
    assert (result["records_in"], result["records_out"], result["table_version"]) == (20, 20, 2)
    assert event.segment.id == result["output"]["segment_id"] and event.segment.origin is Origin.MERGE
    assert event.segment.records == 20 and event.plan_id == result["plan_id"]
    assert harness.catalog_store.marks["t"].announced == 2, "remembered durably"


def test_a_failed_plan_is_reported_without_an_output_event(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    a, b = harness.day(0), harness.day(1)
    harness.store.failures[make_plan("t", "minor", [a, b], output_level=1).plan_id] = ValueError("no")
    handler.process(harness.loaded(a, b))
    assert [m[0] for m in harness.publisher.sent] == ["results"]
    assert harness.results()[0]["error"] == "ValueError: no"


def test_a_commit_left_unannounced_by_a_crash_is_announced_at_restart(harness: Harness) -> None:
    harness.store.create("t")
    harness.handler(MINOR).process(harness.loaded(harness.day(0)))  # the state file now exists
    a, b = harness.store.load(harness.day(1)), harness.store.load(harness.day(2))
    plan = make_plan("t", "minor", [a, b], output_level=1)
    harness.store.commit(plan, load_config(MINOR).for_table("t"))  # committed; then the job died

    restarted = harness.handler(MINOR)
    (result,) = harness.results()
    assert result["plan_id"] == plan.plan_id and result["table_version"] == 3
    assert [e.segment.id for e in harness.re_emitted()] == [plan.output.id]
    assert restarted.catalog.get("t", plan.output.id) is not None

    harness.handler(MINOR)  # a second restart: already announced, not again
    assert len(harness.results()) == 1


def test_a_commit_a_save_folded_but_the_job_never_announced_is_announced_at_restart(harness: Harness) -> None:
    """A batch's save folds its tables' newest commits, a running merge's among them; the saved
    mark is then past that commit, and the job died before announcing it. Found by bench/years.py
    in CI (a commit without a result): the restart read the log from the mark and never saw it."""
    harness.store.create("t")
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(harness.day(0)))
    a, b = harness.store.load(harness.day(1)), harness.store.load(harness.day(2))
    plan = make_plan("t", "minor", [a, b], output_level=1)
    harness.store.commit(plan, load_config(MINOR).for_table("t"))  # by a merge not reported yet
    handler.keeper.save(["t"])
    mark = harness.catalog_store.marks["t"]
    assert (mark.version, mark.unannounced) == (3, (3,))

    harness.handler(MINOR)  # the job died; its restart
    assert [r["plan_id"] for r in harness.results()] == [plan.plan_id]
    assert [e.segment.id for e in harness.re_emitted()] == [plan.output.id]
    assert harness.catalog_store.marks["t"].unannounced == ()
    harness.handler(MINOR)
    assert len(harness.results()) == 1, "announced once"


def test_a_result_the_killed_job_sent_is_not_sent_again_but_its_outputs_events_are(harness: Harness) -> None:
    harness.store.create("t")
    harness.handler(MINOR).process(harness.loaded(harness.day(0)))
    a, b = harness.store.load(harness.day(1)), harness.store.load(harness.day(2))
    plan = make_plan("t", "minor", [a, b], output_level=1)
    commit = harness.store.commit(plan, load_config(MINOR).for_table("t"))
    result = MergeResult.succeeded(plan, commit, harness.clock(), False)
    harness.publisher.send_all([("results", "t", harness.codec.encode_merge_result(result), None)])
    # ... the job was killed here: its outputs' events unsent, the announced version unsaved

    harness.handler(MINOR)
    assert [r["plan_id"] for r in harness.results()] == [plan.plan_id], "the result once"
    assert [e.segment.id for e in harness.re_emitted()] == [plan.output.id], "the next attempt's trigger"
    assert harness.catalog_store.marks["t"].announced == commit.version


def test_a_first_start_does_not_announce_the_tables_past(harness: Harness) -> None:
    harness.store.create("t")
    a, b = harness.store.load(harness.day(0)), harness.store.load(harness.day(1))
    harness.store.commit(make_plan("t", "minor", [a, b], output_level=1), load_config(MINOR).for_table("t"))
    harness.handler(MINOR)
    assert harness.publisher.sent == []


def test_a_delivery_failure_fails_the_batch_so_that_it_is_replayed(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    harness.publisher.fail = DeliveryError("1 message(s) not acknowledged")
    batch = harness.loaded(harness.day(0), harness.day(1))
    with pytest.raises(DeliveryError):
        handler.process(batch)
    harness.publisher.fail = None
    restarted = harness.handler(MINOR)  # the failed batch stopped the query; the job restarts
    restarted.process(batch)  # and replays the batch
    assert harness.statuses() == [MergeStatus.SUCCEEDED], "the committed plan is announced, once"
    assert harness.results()[0]["plan_id"] == harness.store.calls[0] and len(harness.store.commits["t"]) == 3


def test_a_plan_reported_failed_whose_commit_landed_is_announced_succeeded_once_folded(
    harness: Harness,
) -> None:
    """Issue 49's years run: 11 merge commits had no SUCCEEDED result. A commit whose answer is
    lost (an object store outage) fails the run after it landed; the batch's save folds the
    commit from the log, and the result that supersedes the FAILED one follows."""
    harness.store.create("t")
    handler = harness.handler(MINOR)
    a, b = harness.day(0), harness.day(1)
    lost = make_plan("t", "minor", [a, b], output_level=1)
    harness.store.failures_after_commit[lost.plan_id] = TimeoutError("the commit's answer was lost")
    handler.process(harness.loaded(a, b))

    assert [(r["plan_id"], r["status"]) for r in harness.results()] == [
        (lost.plan_id, MergeStatus.FAILED),
        (lost.plan_id, MergeStatus.SUCCEEDED),
    ]
    told = harness.results()[1]
    assert told["table_version"] == harness.store.committed_version("t", lost.plan_id) == 2
    assert told["records_out"] == 20
    assert [e.segment.id for e in harness.re_emitted()] == [lost.output.id], "its output's event follows"
    assert sum(1 for c in harness.store.commits["t"] if c.plan_id == lost.plan_id) == 1, "committed once"
    assert handler.catalog.get("t", lost.output.id) is not None

    handler.process(harness.loaded(harness.day(2)))  # later batches: not told again
    assert len(harness.results()) == 2

"""The runner: conflicts retried with backoff, stale plans re-planned once, failed plans cooling down."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from compactor.domain.events import MergeStatus
from compactor.domain.plans import MergePlan, make_plan
from compactor.domain.segments import Origin, Segment
from compactor.errors import ContentMismatch
from tests.helpers.harness import Harness

MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}


def test_a_conflict_is_retried_with_backoff_and_then_commits(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    a, b, c = harness.day(0), harness.day(1), harness.day(2)
    harness.store.conflicts[_plan([a, b, c]).plan_id] = 2  # plan ids are deterministic
    handler.process(harness.loaded(a, b, c))

    assert harness.statuses() == [MergeStatus.SUCCEEDED]
    assert len(harness.store.calls) == 3 and handler.stats.conflicts == 2
    assert harness.sleeps == [0.2, 0.4], "exponential backoff between tries"
    assert [s.id for s in handler.catalog.segments("t")] == [harness.re_emitted()[0].segment.id]


def test_conflicts_that_never_end_fail_the_plan_which_then_cools_down(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    segments = [harness.day(i) for i in range(3)]
    harness.store.always_conflicting = True
    handler.process(harness.loaded(*segments))
    (result,) = harness.results()
    assert result["status"] is MergeStatus.FAILED and "CommitConflict" in result["error"]
    assert len(harness.store.calls) == 5 and handler.stats.conflicts == 4, "bounded retries"

    handler.process(harness.loaded(harness.day(3)))  # the next event: the plan is cooling down
    assert len(harness.store.calls) == 5 and len(harness.results()) == 1
    harness.clock.now += timedelta(minutes=6)
    harness.store.always_conflicting = False
    handler.process(harness.loaded(harness.day(4)))  # cooled down: tried again, and it commits
    assert harness.statuses() == [MergeStatus.FAILED, MergeStatus.SUCCEEDED]


def test_a_plan_that_fails_cools_down_instead_of_failing_on_every_event(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    segments = [harness.day(i) for i in range(3)]
    plan_id = _plan(segments).plan_id
    harness.store.failures[plan_id] = RuntimeError("disk full")
    handler.process(harness.loaded(*segments))
    handler.process(harness.loaded(harness.day(3)))
    assert harness.statuses() == [MergeStatus.FAILED]
    assert harness.results()[0]["error"] == "RuntimeError: disk full"
    assert harness.store.calls == [plan_id] and handler.stats.failed_merges == 1
    assert len(handler.catalog.segments("t")) == 4, "nothing changed"
    (failure,) = handler.catalog.failures("t")
    assert (failure.key, failure.rule, failure.reason) == (plan_id, "minor", "RuntimeError: disk full")
    assert failure.until == failure.at + timedelta(minutes=5)


def test_a_restarted_job_keeps_cooling_what_was_cooling(harness: Harness) -> None:
    harness.store.create("t")
    segments = [harness.day(i) for i in range(3)]
    plan_id = _plan(segments).plan_id
    harness.store.failures[plan_id] = RuntimeError("disk full")
    harness.handler(MINOR).process(harness.loaded(*segments))
    del harness.store.failures[plan_id]
    restarted = harness.handler(MINOR)  # reads the saved catalog, failures and all
    restarted.process(harness.loaded(harness.day(3)))
    assert harness.store.calls == [plan_id], "not retried at once by the restart"
    harness.clock.now += timedelta(minutes=5)
    restarted.process(harness.loaded(harness.day(4)))
    assert harness.statuses() == [MergeStatus.FAILED, MergeStatus.SUCCEEDED]


def test_a_stale_plan_is_skipped_and_re_planned_once_against_the_table(harness: Harness) -> None:
    """A concurrent writer removes an input while the merge retries: the plan is stale."""
    harness.store.create("t")
    handler = harness.handler(MINOR)
    a, b, c, d = (harness.day(i) for i in range(4))
    stale = _plan([a, b, c])
    harness.store.conflicts[stale.plan_id] = 1
    harness.store.on_conflict = lambda plan: harness.store.drop("t", "d01")
    handler.process(harness.loaded(a, b, c, d))

    assert harness.statuses() == [MergeStatus.SKIPPED, MergeStatus.SUCCEEDED]
    skipped, merged = harness.results()
    assert skipped["plan_id"] == stale.plan_id and "d01" in skipped["error"]
    assert merged["inputs"] == ["d00", "d02", "d03"], "re-planned against what the table holds now"
    assert handler.stats.replans == 1 and len(harness.store.calls) == 2
    assert {s.id for s in handler.catalog.segments("t")} == {merged["output"]["segment_id"]}


def test_a_re_plan_that_is_stale_again_is_not_re_planned_forever(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    segments = [harness.day(i) for i in range(5)]
    for s in segments[3:]:
        harness.store.load(s)  # in the table; their events have not arrived yet
    harness.store.always_conflicting = True
    dropped = iter(["d01", "d02"])
    harness.store.on_conflict = lambda plan: harness.store.drop("t", next(dropped, "-"))
    handler.process(harness.loaded(*segments[:3]))
    assert harness.statuses() == [MergeStatus.SKIPPED, MergeStatus.SKIPPED]
    assert handler.stats.replans == 2 and len(harness.store.calls) == 2


def test_merges_re_trigger_through_their_own_completion_events(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(*(harness.day(i) for i in range(3))))
    (event,) = harness.re_emitted()
    assert event.segment.origin is Origin.MERGE and event.plan_id == harness.results()[0]["plan_id"]
    handler.process([harness.envelope(harness.publisher.on("segments")[0][2])])
    assert handler.stats.attempts_by_origin == {"load": 3, "merge": 1}


def _plan(segments: list[Segment]) -> MergePlan:
    return make_plan("t", "minor", segments, output_level=1)


def test_a_table_whose_work_keeps_failing_is_left_alone_for_the_cool_down(harness: Harness) -> None:
    harness.store.create("t")
    calls: list[str] = []

    def broken(table: str, upsert: object, segment_ids: object) -> list[object]:
        calls.append(table)
        raise RuntimeError("the table cannot be read")

    harness.store.key_rows = broken  # type: ignore[method-assign]
    upsert = {"tables": {"t": {"upsert": {"primary_key": ["id"], "comparison_column": "v"},
                               "rules": [{"rule": "upsert_compaction"}]}}}  # fmt: skip
    handler = harness.handler(upsert)
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    assert calls == ["t"] and handler.stats.attempt_errors == 1
    assert handler.stats.cooled_attempts == 2, "the next events did not retry at once"
    harness.clock.now += timedelta(minutes=6)
    handler.process(harness.loaded(harness.day(3)))
    assert calls == ["t", "t"], "tried again once the cool-down passed"


def test_the_cool_down_is_a_config_setting(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler({**MINOR, "operations": {"cool_down": "30s"}})
    segments = [harness.day(i) for i in range(3)]
    harness.store.failures[_plan(segments).plan_id] = RuntimeError("disk full")
    handler.process(harness.loaded(*segments))
    harness.clock.now += timedelta(seconds=20)
    handler.process(harness.loaded(harness.day(3)))
    assert len(harness.store.calls) == 1, "20 s later the plan still cools down"
    harness.clock.now += timedelta(seconds=15)
    handler.process(harness.loaded(harness.day(4)))
    assert len(harness.store.calls) == 2, "35 s later it is tried again, not after the old fixed 5 minutes"


def test_a_merge_that_would_not_fit_on_the_disk_is_skipped_and_tried_again_later(harness: Harness) -> None:
    harness.store.create("t")
    harness.store.free = 10 * 1024 * 1024  # 10 MiB: less than the 64 MiB margin
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    (result,) = harness.results()
    assert result["status"] is MergeStatus.SKIPPED
    assert result["error"].startswith("insufficient_space: the output needs about")
    assert harness.store.calls == [], "nothing was written"
    failed = handler.metrics.registry.get_sample_value(
        "compactor_merges_failed_total", {"table": "t", "rule": "minor", "reason": "insufficient_space"}
    )
    assert failed == 1
    harness.store.free = 10 * 1024**3
    harness.clock.now += timedelta(minutes=6)
    handler.process(harness.loaded(harness.day(3)))
    assert harness.statuses() == [MergeStatus.SKIPPED, MergeStatus.SUCCEEDED]


def test_free_space_is_known_on_local_disks_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    from collections import namedtuple

    from compactor.delta import paths

    asked: list[Path] = []
    usage = namedtuple("usage", "total used free")

    def disk_usage(path: Path) -> object:
        asked.append(path)
        return usage(100, 58, 42)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    assert paths.free_bytes(str(tmp_path / "warehouse" / "t")) == 42, (
        "a table not written yet: its nearest folder"
    )
    assert paths.free_bytes(f"file://{tmp_path}") == 42
    assert asked == [tmp_path, tmp_path]
    assert paths.free_bytes("s3a://bucket/warehouse/t") is None


def test_a_merge_whose_certificate_fails_is_failed_counted_and_held_like_any_failure(
    harness: Harness,
) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    segments = [harness.day(i) for i in range(3)]
    plan_id = _plan(segments).plan_id
    why = f"table t: plan {plan_id} not committed: inputs 30 rows, 00000000000000aa but output 29 rows, ..."
    harness.store.failures[plan_id] = ContentMismatch(why)
    handler.process(harness.loaded(*segments))
    assert harness.statuses() == [MergeStatus.FAILED]
    assert harness.results()[0]["error"] == f"ContentMismatch: {why}"
    registry = handler.metrics.registry  # type: ignore[attr-defined]
    assert registry.get_sample_value("compactor_certificates_refused_total", {"table": "t"}) == 1
    assert len(handler.catalog.segments("t")) == 3, "nothing changed"
    (failure,) = handler.catalog.failures("t")
    assert failure.key == plan_id and failure.until == failure.at + timedelta(minutes=5)

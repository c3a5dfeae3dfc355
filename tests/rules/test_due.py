"""Due times: when time alone may change a table's plans, derived from its segments and settings."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.config.loading import load_config
from compactor.config.off_peak import OffPeak
from compactor.config.tables import TableSettings
from compactor.domain.columns import SegmentColumns
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import ConfigError
from compactor.rules.due import next_due
from compactor.rules.engine import evaluate
from tests.rules.test_planner_properties import FAST, scenarios

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
GB = 1 << 30


def table(**keys: object) -> TableSettings:
    return load_config({"defaults": keys}).defaults


def part(sid: str, ended_ago: timedelta, loaded_ago: timedelta | None = None) -> Segment:
    end = NOW - ended_ago
    loaded = NOW - (loaded_ago if loaded_ago is not None else ended_ago)
    return Segment(sid, "t", TimeRange(end - timedelta(minutes=30), end), loaded, 10, bytes=1 << 20)


def test_seed_003_a_large_partition_becomes_eligible_seventy_minutes_after_its_last_timestamp() -> None:
    """2.5 GB fits no pool until it is 70 minutes old; then it packs with a 1 GB partner that
    reached the large pool ten minutes earlier. Each due time is the next pool entry."""
    big = Segment("big", "t", TimeRange(NOW - timedelta(minutes=25), NOW - timedelta(minutes=15)), NOW, 1,
                  bytes=int(2.5 * GB))  # fmt: skip
    old = Segment("old", "t", TimeRange(NOW - timedelta(minutes=35), NOW - timedelta(minutes=25)), NOW, 1,
                  bytes=GB)  # fmt: skip
    settings, now, dues = table(rules=[{"rule": "bin_pack"}]), NOW, []
    while not evaluate("t", [big, old], settings, now).plans:
        due = next_due(SegmentColumns.of([big, old]), settings, now)
        assert due is not None
        dues.append((due.at - NOW, due.why))
        now = due.at
    assert dues == [
        (timedelta(minutes=45), "a segment reaches pool large's age (1:10:00)"),
        (timedelta(minutes=55), "a segment reaches pool large's age (1:10:00)"),
    ]
    assert [sorted(p.input_ids) for p in evaluate("t", [big, old], settings, now).plans] == [["big", "old"]]


def test_windows_are_due_just_after_a_segment_leaves_them() -> None:
    segments = [part("a", timedelta(days=2), loaded_ago=timedelta(days=29))]
    due = next_due(SegmentColumns.of(segments), table(allowed_compaction_days=30), NOW)
    assert due is not None and due.at == NOW + timedelta(days=1, microseconds=1)
    due = next_due(SegmentColumns.of(segments), table(lookback="3d"), NOW)
    assert due is not None and due.at == NOW + timedelta(days=1, microseconds=1)
    assert next_due(SegmentColumns.of(segments), table(), NOW) is None, "nothing depends on time"


def test_a_schedule_fires_after_the_previous_computation_so_none_is_skipped() -> None:
    settings = table(rules=[{"rule": "major", "trigger": "manual", "schedule": "0 2 * * *"}])
    empty = SegmentColumns.of([])
    due = next_due(empty, settings, NOW)
    assert due is not None and due.at == datetime(2024, 6, 2, 2, 0, tzinfo=UTC) and due.rule == "major"
    # computed last at 01:59; now it is 02:00:01: the 02:00 fire is due at once
    late = datetime(2024, 6, 2, 2, 0, 1, tzinfo=UTC)
    due = next_due(empty, settings, late, since=datetime(2024, 6, 2, 1, 59, tzinfo=UTC))
    assert due is not None and due.at == late and due.rule == "major"


def test_a_bad_schedule_is_refused_with_the_value() -> None:
    with pytest.raises(ConfigError, match="'every night' is not a cron expression"):
        table(rules=[{"rule": "major", "schedule": "every night"}])


def test_the_off_peak_window_opens_once_a_day_and_may_wrap_midnight() -> None:
    window = OffPeak(start=time(22), end=time(6))
    assert window.contains(datetime(2024, 6, 1, 23, tzinfo=UTC))
    assert window.contains(datetime(2024, 6, 2, 5, 59, tzinfo=UTC))
    assert not window.contains(datetime(2024, 6, 2, 6, tzinfo=UTC))
    assert window.next_start(NOW) == datetime(2024, 6, 1, 22, tzinfo=UTC)
    assert window.next_start(datetime(2024, 6, 1, 23, tzinfo=UTC)) == datetime(2024, 6, 2, 22, tzinfo=UTC)
    due = next_due(SegmentColumns.of([part("a", timedelta(hours=1))]), table(), NOW, off_peak=window)
    assert due is not None and due.at == datetime(2024, 6, 1, 22, tzinfo=UTC)
    with pytest.raises(ConfigError, match="empty window"):
        load_config({"operations": {"off_peak": {"start": "22:00", "end": "22:00"}}})


@FAST
@given(scenarios(), st.sampled_from((0.0, 0.3, 0.9, 0.999999)))
def test_nothing_changes_before_the_due_time(
    scenario: tuple[list[Segment], TableSettings, datetime], fraction: float
) -> None:
    """Whatever the rules and segments: evaluated at any moment between now and the due time,
    the rules make the plans they make now (so an attempt at the due time misses nothing)."""
    segments, settings, now = scenario
    due = next_due(SegmentColumns.of(segments), settings, now)
    horizon = due.at if due is not None else now + timedelta(days=3650)
    later = now + (horizon - now) * fraction
    if due is not None:  # strictly before it (timedelta arithmetic rounds to the microsecond)
        later = max(now, min(later, due.at - timedelta(microseconds=1)))
    before = [p.plan_id for p in evaluate("t", segments, settings, now, explain=False).plans]
    after = [p.plan_id for p in evaluate("t", segments, settings, later, explain=False).plans]
    assert after == before, (due, later)

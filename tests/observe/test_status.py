"""The status text and JSON, from segments, ready plans and merge commits (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from compactor.catalog.changes import CommitRecord
from compactor.catalog.failures import Failure
from compactor.config.loading import load_config
from compactor.domain.columns import SegmentColumns
from compactor.domain.plans import make_plan
from compactor.domain.segments import Origin, RowCount, Segment, TimeRange
from compactor.observe.status.table_status import DeletedRows, render, table_status
from compactor.rules.due import Due, table_due
from compactor.rules.late_data import summary
from tests.helpers.segments import seg


def test_status_says_levels_what_waits_and_the_newest_merges_first() -> None:
    a, b, c = (seg(i, f"2024-01-0{n}", table="t", records=n) for n, i in enumerate("abc", start=1))
    plan = make_plan("t", "minor", [a, b], output_level=1)
    history = [
        CommitRecord("t", 1, (a,), ()),
        CommitRecord("t", 2, (c,), ("x", "y"), plan_id="p1", op="merge", rule="minor", level="1"),
        CommitRecord("t", 3, (c,), ("c0", "c1", "c2"), plan_id="p2", op="merge", rule="major", level="2"),
    ]
    status = table_status("t", False, [a, b, c], [plan], history, layout="zorder(customer_id,country)")
    assert render(status).splitlines() == [
        f"table t: merging off, 3 segment(s), {a.bytes + b.bytes + c.bytes} bytes",
        "  level 0 ONLINE: 3",
        "  ready to merge now: 1 plan(s) over 2 segment(s)",
        "  next due: on its next event only",
        "  merges lay rows out in: zorder(customer_id,country)",
        "  last merges:",
        "    v3 major (2): 3 -> c",
        "    v2 minor (1): 2 -> c",
    ]
    doc = status.to_json()
    assert doc["layout"] == "zorder(customer_id,country)"
    unordered = render(table_status("t", True, [a], [], []))
    assert (
        "  merges lay rows out in: the order they are read (no sort or time column)" in unordered.splitlines()
    )
    assert doc["ready"] == [{"rule": "minor", "inputs": 2, "bytes": plan.bytes_in, "plan_id": plan.plan_id}]
    assert [m["plan_id"] for m in doc["last_merges"]] == ["p2", "p1"]


def test_failures_show_newest_first_with_what_still_cools_down() -> None:
    at = datetime(2024, 3, 1, 12, tzinfo=UTC)
    failures = [
        Failure("p2", "minor", "insufficient_space: 5 bytes free", at, at + timedelta(minutes=5)),
        Failure("table:t", None, "RuntimeError: boom", at - timedelta(hours=1), at - timedelta(minutes=55)),
    ]
    status = table_status("t", True, [], [], [], failures, now=at + timedelta(minutes=1))
    assert render(status).splitlines()[-3:] == [
        "  failures:",
        "    2024-03-01T12:00:00+00:00 minor p2: insufficient_space: 5 bytes free "
        "(cooling down until 2024-03-01T12:05:00+00:00)",
        "    2024-03-01T11:00:00+00:00 table table:t: RuntimeError: boom",
    ]
    assert [f["cooling"] for f in status.to_json()["failures"]] == [True, False]


def test_status_shows_the_watermark_and_each_buckets_late_run() -> None:
    monday = datetime(2024, 1, 1, tzinfo=UTC)
    week = Segment(
        "W", "t", TimeRange(monday, monday + timedelta(days=7)), monday, bytes=7000, origin=Origin.MERGE
    )
    nxt = Segment(
        "N", "t", TimeRange(monday + timedelta(days=7), monday + timedelta(days=8)), monday, bytes=10
    )
    straggler = Segment(
        "L",
        "t",
        TimeRange(monday + timedelta(days=2), monday + timedelta(days=3)),
        monday + timedelta(days=9),
        bytes=350,
    )
    rule = {"rule": "auto_merge", "levels": ["day", "week"], "sealing": {"allowed_lateness": "12h"}}
    rules = load_config({"defaults": {"rules": [rule]}}).for_table("t").rules
    late = summary([week, nxt, straggler], rules)
    status = table_status("t", True, [week, nxt, straggler], [], [], late=late)
    assert render(status).splitlines()[5:7] == [
        "  late data: watermark 2024-01-08T12:00:00+00:00, 1 late segment(s)",
        "    sealed [2024-01-01T00:00:00+00:00, 2024-01-08T00:00:00+00:00): 1 late, 350 of 7000 bytes (5.0%); waits",
    ]
    assert summary([week], load_config({}).for_table("t").rules) is None, "no sealing, no late data"


def test_status_says_when_the_table_comes_due_and_why() -> None:
    """A 2.5 GB partition 15 minutes old reaches the large pool at 70 minutes (Hydrolix's merge pools); a
    failed plan's cool-down ending first is the earlier reason."""
    now = datetime(2024, 3, 1, 12, tzinfo=UTC)
    big = Segment("big", "t", TimeRange(now - timedelta(minutes=25), now - timedelta(minutes=15)), now, 1,
                  bytes=int(2.5 * (1 << 30)))  # fmt: skip
    settings = load_config({"defaults": {"rules": [{"rule": "bin_pack"}]}}).defaults
    due = table_due(SegmentColumns.of([big]), settings, now)
    status = table_status("t", True, [big], [], [], now=now, due=due)
    assert (
        "  next due: 2024-03-01T12:55:00+00:00 (a segment reaches pool large's age (1:10:00))"
        in render(status).splitlines()
    )
    cooling = [("p1", now + timedelta(minutes=5))]
    assert table_due(SegmentColumns.of([big]), settings, now, cooling) == Due(
        now + timedelta(minutes=5), "the cool-down of p1 ends"
    )
    assert status.to_json()["next_due"] == {
        "at": "2024-03-01T12:55:00+00:00", "why": "a segment reaches pool large's age (1:10:00)", "rule": None,
    }  # fmt: skip


def test_status_counts_the_deleted_rows_its_files_still_hold() -> None:
    counts = [RowCount(70, 30), RowCount(100, 0), RowCount(-1, 5)]  # no statistics: not counted
    status = table_status("t", True, [], [], [], deleted=DeletedRows.of(counts, 0.2))
    assert (
        "  deleted rows in files: 30 of 200 (15.0%); a segment is purged at 20%"
        in render(status).splitlines()
    )
    assert status.to_json()["deleted_rows"] == {"rows": 30, "ratio": 0.15, "purge_ratio": 0.2}
    off = table_status("t", True, [], [], [], deleted=DeletedRows.of([], None))
    assert "  deleted rows in files: 0 of 0 (0.0%); purging is off" in render(off).splitlines()


def test_status_says_how_far_the_log_is_from_its_checkpoint() -> None:
    from compactor.observe.status.table_status import LogState

    behind = table_status("t", True, [], [], [], log=LogState(version=57, checkpoint=50, every=10))
    assert (
        "  log: version 57, 7 commit(s) since the checkpoint at version 50 (one every 10)"
        in render(behind).splitlines()
    )
    assert behind.to_json()["log"] == {
        "version": 57,
        "checkpoint": 50,
        "commits_since_checkpoint": 7,
        "checkpoint_every": 10,
    }
    fresh = render(table_status("t", True, [], [], [], log=LogState(3, -1, 10)))
    assert "  log: version 3, 4 commit(s), no checkpoint yet (one every 10)" in fresh.splitlines()

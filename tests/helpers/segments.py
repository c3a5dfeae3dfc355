"""Builders for segments in planner tests."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from compactor.domain.segments import Segment, TimeRange


def day(d: str) -> datetime:
    return datetime.combine(date.fromisoformat(d), datetime.min.time(), UTC)


def seg(sid: str, start: str, end_inclusive: str | None = None, table: str = "t", **kw: object) -> Segment:
    """A segment over whole days: `seg("A", "2022-01-01", "2022-01-31")` is [01-01, 02-01)."""
    begin = day(start)
    end = day(end_inclusive or start) + timedelta(days=1)
    return Segment(id=sid, table=table, range=TimeRange(begin, end), loaded_at=end, **kw)  # type: ignore[arg-type]


def hours(sid: str, start: datetime, n: int = 1, table: str = "t") -> Segment:
    end = start + timedelta(hours=n)
    return Segment(id=sid, table=table, range=TimeRange(start, end), loaded_at=end)

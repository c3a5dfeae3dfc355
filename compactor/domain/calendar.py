"""Natural calendar buckets: hour, day, week (Monday start), month, quarter, year.

All arithmetic is in UTC. A week is cut by its month: a week that spans two
months (or years) is two buckets, as the Kylin auto-merge spec requires.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from compactor.domain.segments import TimeRange, utc


class Level(StrEnum):
    """Time-layer levels, from the smallest to the largest."""

    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    QUARTER = "quarter"
    YEAR = "year"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {level: i for i, level in enumerate(Level)}


def largest_first(levels: tuple[Level, ...] | list[Level]) -> list[Level]:
    return sorted(set(levels), key=lambda lv: lv.rank, reverse=True)


def _month_start(t: datetime) -> datetime:
    return t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _add_months(t: datetime, months: int) -> datetime:
    index = t.year * 12 + (t.month - 1) + months
    return t.replace(year=index // 12, month=index % 12 + 1, day=1)


def bucket(level: Level, instant: datetime) -> TimeRange:
    """The natural bucket of `level` that contains `instant`."""
    t = utc(instant)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if level is Level.HOUR:
        start = t.replace(minute=0, second=0, microsecond=0)
        return TimeRange(start, start + timedelta(hours=1))
    if level is Level.DAY:
        return TimeRange(day, day + timedelta(days=1))
    if level is Level.WEEK:
        monday = day - timedelta(days=day.weekday())
        month = _month_start(t)
        return TimeRange(max(monday, month), min(monday + timedelta(days=7), _add_months(month, 1)))
    if level is Level.MONTH:
        month = _month_start(t)
        return TimeRange(month, _add_months(month, 1))
    if level is Level.QUARTER:
        quarter = _month_start(t).replace(month=(t.month - 1) // 3 * 3 + 1)
        return TimeRange(quarter, _add_months(quarter, 3))
    year = _month_start(t).replace(month=1)
    return TimeRange(year, _add_months(year, 12))

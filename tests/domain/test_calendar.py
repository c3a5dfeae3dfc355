from datetime import UTC, datetime

import pytest

from compactor.domain.calendar import Level, bucket, largest_first
from compactor.domain.segments import TimeRange


def t(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("level", "instant", "start", "end"),
    [
        (Level.HOUR, t(2024, 2, 29, 23, 59), t(2024, 2, 29, 23), t(2024, 3, 1, 0)),
        (Level.DAY, t(2024, 2, 29, 12), t(2024, 2, 29), t(2024, 3, 1)),
        (Level.DAY, t(2023, 12, 31, 23), t(2023, 12, 31), t(2024, 1, 1)),
        # weeks start on Monday and are cut by their month
        (Level.WEEK, t(2022, 2, 23), t(2022, 2, 21), t(2022, 2, 28)),
        (Level.WEEK, t(2022, 2, 1), t(2022, 2, 1), t(2022, 2, 7)),
        (Level.WEEK, t(2022, 1, 31), t(2022, 1, 31), t(2022, 2, 1)),
        (Level.WEEK, t(2021, 12, 29), t(2021, 12, 27), t(2022, 1, 1)),
        (Level.WEEK, t(2022, 1, 2), t(2022, 1, 1), t(2022, 1, 3)),
        (Level.WEEK, t(2024, 2, 29), t(2024, 2, 26), t(2024, 3, 1)),
        (Level.MONTH, t(2024, 2, 10), t(2024, 2, 1), t(2024, 3, 1)),
        (Level.MONTH, t(2023, 2, 28, 23), t(2023, 2, 1), t(2023, 3, 1)),
        (Level.MONTH, t(2023, 12, 31), t(2023, 12, 1), t(2024, 1, 1)),
        (Level.QUARTER, t(2024, 3, 31, 23), t(2024, 1, 1), t(2024, 4, 1)),
        (Level.QUARTER, t(2024, 12, 1), t(2024, 10, 1), t(2025, 1, 1)),
        (Level.YEAR, t(2024, 12, 31, 23, 59), t(2024, 1, 1), t(2025, 1, 1)),
    ],
)
def test_bucket(level: Level, instant: datetime, start: datetime, end: datetime) -> None:
    assert bucket(level, instant) == TimeRange(start, end)


def test_bucket_start_is_inclusive_and_end_exclusive() -> None:
    assert bucket(Level.DAY, t(2024, 3, 1)) == TimeRange(t(2024, 3, 1), t(2024, 3, 2))
    assert bucket(Level.HOUR, t(2024, 3, 1, 5)).start == t(2024, 3, 1, 5)


def test_leap_year_february_has_29_days() -> None:
    assert bucket(Level.MONTH, t(2024, 2, 1)).duration.days == 29
    assert bucket(Level.MONTH, t(2023, 2, 1)).duration.days == 28
    assert bucket(Level.YEAR, t(2024, 6, 1)).duration.days == 366


def test_largest_first_orders_and_dedupes() -> None:
    assert largest_first([Level.WEEK, Level.HOUR, Level.YEAR, Level.WEEK]) == [
        Level.YEAR,
        Level.WEEK,
        Level.HOUR,
    ]

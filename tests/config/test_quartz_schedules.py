"""Quartz schedules (as Pinot writes them) fire when Quartz would fire them, through the due-time
code too; a Quartz form croniter cannot express is refused on load, naming the value."""

from __future__ import annotations

import calendar
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import pytest
from croniter import CroniterBadDateError, croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.config.loading import load_config
from compactor.config.rules import CRONITER_YEARS, cron_expression, next_fire
from compactor.config.tables import TableSettings
from compactor.domain.columns import SegmentColumns
from compactor.errors import ConfigError
from compactor.rules.due import next_due

START = datetime(2024, 1, 1, tzinfo=UTC)


def fires(schedule: str, after: datetime = START, count: int = 6) -> list[datetime]:
    found: list[datetime] = []
    while len(found) < count and (fire := next_fire(schedule, after)) is not None:
        found.append(after := fire)
    return found


def noon(*days: tuple[int, int, int]) -> list[datetime]:
    return [datetime(y, m, d, 12, tzinfo=UTC) for y, m, d in days]


def test_the_third_friday_is_the_third_not_the_second() -> None:
    assert fires("0 0 12 ? * 6#3", count=3) == noon((2024, 1, 19), (2024, 2, 16), (2024, 3, 15))
    assert fires("0 0 12 ? * FRI#3", count=3) == noon((2024, 1, 19), (2024, 2, 16), (2024, 3, 15))


def test_every_other_weekday_from_monday_is_monday_wednesday_friday() -> None:
    days = fires("0 0 12 ? * 2/2", count=6)
    assert [d.strftime("%a") for d in days] == ["Mon", "Wed", "Fri"] * 2
    assert days[0] == datetime(2024, 1, 1, 12, tzinfo=UTC)


def test_the_last_friday_of_each_month_is_accepted() -> None:
    assert fires("0 0 12 ? * 6L", count=3) == noon((2024, 1, 26), (2024, 2, 23), (2024, 3, 29))
    assert fires("0 0 12 ? * L", count=2) == noon((2024, 1, 6), (2024, 1, 13)), "L alone: Saturday"


def test_a_year_field_is_kept_so_2030_never_fires_before_2030() -> None:
    assert fires("0 0 12 * * ? 2030", count=2) == noon((2030, 1, 1), (2030, 1, 2))
    assert fires("0 30 9 ? 3 MON 2031-2032", count=1) == [datetime(2031, 3, 3, 9, 30, tzinfo=UTC)]
    assert fires("0 0 12 * * ? 2090", count=1) == noon((2090, 1, 1)), (
        "further than croniter's default 50 years"
    )
    assert fires("0 0 12 * * ? 2020") == [], "its years are past: it never fires"


def test_quartz_fields_are_spelled_out_seconds_last() -> None:
    assert cron_expression("0 15 10 ? * 6") == "15 10 * * 5 0"
    assert cron_expression("5/20 0 22-2/2 L * ?") == "0 0,2,22 l * * 5,25,45"
    assert cron_expression("0 0 12 ? * FRI-MON") == "0 12 * * 0,1,5,6 0"
    assert cron_expression("0 0 12 15W JAN-MAR ? 2030") == "0 12 15w 1,2,3 * 0 2030"
    assert cron_expression("0 2 * * *") == "0 2 * * *", "standard cron is taken as it is"
    assert cron_expression("0 2 ? * *") == "0 2 ? * *", "croniter reads its own `?`"


def rule_table(schedule: str) -> TableSettings:
    rules = [{"rule": "major", "trigger": "manual", "schedule": schedule}]
    return load_config({"defaults": {"rules": rules}}).for_table("t")


def test_the_due_time_code_runs_a_quartz_schedule() -> None:
    now = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
    empty = SegmentColumns.of([])
    due = next_due(empty, rule_table("0 0 12 ? * 6#3"), now)
    assert due is not None and due.at == datetime(2024, 6, 21, 12, tzinfo=UTC) and due.rule == "major"
    due = next_due(empty, rule_table("0 0 12 ? * 6L"), now)
    assert due is not None and due.at == datetime(2024, 6, 28, 12, tzinfo=UTC)
    due = next_due(empty, rule_table("0 0 12 * * ? 2030"), now)
    assert due is not None and due.at == datetime(2030, 1, 1, 12, tzinfo=UTC)
    due = next_due(empty, rule_table("30 15 * * * ?"), now)
    assert due is not None and due.at == datetime(2024, 6, 1, 12, 15, 30, tzinfo=UTC), (
        "seconds read as seconds"
    )
    assert next_due(empty, rule_table("0 0 12 * * ? 2020"), now) is None, "a past year is never due"


@pytest.mark.parametrize(
    ("schedule", "says"),
    [
        ("0 0 12 L-3 * ?", "day-of-month `L-3`"),
        ("0 0 12 LW * ?", "day-of-month `LW`"),
        ("0 0 12 30W * ?", "day-of-month `30W`: the weekday nearest a day some months lack"),
        ("0 0 12 ? * 6#3,2", "day-of-week `6#3,2`: `nL` (the last day n of the month) and `n#k`"),
        ("0 0 12 ? * 6L,2", "day-of-week `6L,2`"),
        ("0 0 12 ? * 2#6", "day-of-week `2#6`: the week after `#` is 1-5"),
        ("0 0 12 ? * 0", "day-of-week `0`: 0 is out of its range 1-7"),
        ("0 0 12 ? * MON-FRI/2", "day-of-week `MON-FRI/2`: Quartz ignores a step after a name"),
        ("0 0 12 * * ? 2100", "year `2100`: 2100 is out of its range 1970-2099"),
        ("0 0 12 * * ? 2031-2030", "year `2031-2030` runs backwards"),
        ("0 0 12 ? * ?", "Quartz takes `?` in exactly one of them"),
        ("0 0 12 1 * MON 2030", "day-of-month `1` and day-of-week `MON`"),
        ("0 61 * * * ?", "minute `61`: 61 is out of its range 0-59"),
    ],
)
def test_a_quartz_form_croniter_cannot_read_is_refused_naming_the_value(schedule: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        rule_table(schedule)
    line = str(refused.value).splitlines()[-1]
    assert f"schedule {schedule!r} (Quartz's seconds-first form): " in line and says in line


# An independent reading of Quartz's documented semantics, as membership tests over a calendar
# walked day by day: `a-b` runs from a to b, around past the field's end when b < a; `a/n` is
# a, a+n, ... to the field's end; `*/n` starts at the field's start; `n#k` is the k-th day n of
# the month, `nL` its last, `L` in day-of-week Saturday, `L` in day-of-month the last day, `nW`
# the weekday nearest day n that stays in the month.

BOUNDS = {"second": (0, 59), "minute": (0, 59), "hour": (0, 23), "day-of-month": (1, 31),
          "month": (1, 12), "day-of-week": (1, 7), "year": (1970, 2099)}  # fmt: skip
NAMES = {
    "month": ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
    "day-of-week": ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"),
}


@dataclass(frozen=True)
class Term:
    kind: str  # value, range, start_step, range_step, all_step
    first: int
    last: int
    step: int

    def holds(self, value: int, low: int, high: int) -> bool:
        if self.kind == "value":
            return value == self.first
        first = low if self.kind == "all_step" else self.first
        last = self.last if self.kind in ("range", "range_step") else high
        size = high - low + 1
        offset = (value - first) % size
        return offset <= (last - first) % size and offset % self.step == 0


Field = tuple[str, Callable[[int], bool]]


@st.composite
def term(draw: st.DrawFn, field: str, low: int | None = None, high: int | None = None) -> tuple[str, Term]:
    lo, hi = BOUNDS[field]
    low, high = low or lo, high or hi
    kind = draw(st.sampled_from(["value", "range", "start_step", "range_step", "all_step"]))
    first, last = draw(st.integers(low, high)), draw(st.integers(low, high))
    if field == "year" and last < first:
        first, last = last, first  # Quartz refuses a year range that runs backwards
    step = draw(st.integers(1, hi - lo + 1))

    def spell(v: int) -> str:
        names = NAMES.get(field)
        return names[v - 1] if names and kind in ("value", "range") and draw(st.booleans()) else str(v)

    text = {
        "value": spell(first),
        "range": f"{spell(first)}-{spell(last)}",
        "start_step": f"{first}/{step}",
        "range_step": f"{first}-{last}/{step}",
        "all_step": f"*/{step}",
    }[kind]
    return text, Term(kind, first, last, 1 if kind == "range" else step)


@st.composite
def listed(draw: st.DrawFn, field: str, low: int | None = None, high: int | None = None) -> Field:
    lo, hi = BOUNDS[field]
    if draw(st.integers(0, 4)) == 0:
        return "*", lambda v: True
    terms = draw(st.lists(term(field, low, high), min_size=1, max_size=3))
    return ",".join(t for t, _ in terms), lambda v: any(r.holds(v, lo, hi) for _, r in terms)


def quartz_weekday(d: date) -> int:
    return d.isoweekday() % 7 + 1  # Sunday 1 ... Saturday 7


def month_days(d: date) -> int:
    return calendar.monthrange(d.year, d.month)[1]


def nearest_weekday(d: date, day: int) -> int:
    weekday = quartz_weekday(d.replace(day=day))
    if weekday == 7:  # Saturday: the Friday before, or the Monday after when that leaves the month
        return day - 1 if day > 1 else day + 2
    if weekday == 1:  # Sunday: the Monday after, or the Friday before when that leaves the month
        return day + 1 if day < month_days(d) else day - 2
    return day


DayRule = tuple[str, Callable[[date], bool]]


@st.composite
def weekdays(draw: st.DrawFn) -> DayRule:
    kind = draw(st.sampled_from(["list", "list", "nth", "last", "saturday"]))
    day = draw(st.integers(1, 7))
    spelled = NAMES["day-of-week"][day - 1] if draw(st.booleans()) else str(day)
    if kind == "nth":
        nth = draw(st.integers(1, 5))
        return f"{spelled}#{nth}", lambda d: quartz_weekday(d) == day and (d.day - 1) // 7 + 1 == nth
    if kind == "last":
        return f"{spelled}L", lambda d: quartz_weekday(d) == day and d.day + 7 > month_days(d)
    if kind == "saturday":
        return "L", lambda d: quartz_weekday(d) == 7
    text, holds = draw(listed("day-of-week"))
    return text, lambda d: holds(quartz_weekday(d))


@st.composite
def month_days_rule(draw: st.DrawFn) -> DayRule:
    kind = draw(st.sampled_from(["list", "list", "last", "nearest"]))
    if kind == "last":
        return "L", lambda d: d.day == month_days(d)
    if kind == "nearest":
        day = draw(st.integers(1, 28))
        return f"{day}W", lambda d: d.day == nearest_weekday(d, day)
    text, holds = draw(listed("day-of-month"))
    return text, lambda d: holds(d.day)


FIRST_DAY, LAST_DAY = date(2023, 12, 25), date(2026, 1, 6)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(data=st.data())
def test_quartz_days_fire_as_quartz_reads_them(data: st.DataObject) -> None:
    on_weekdays = data.draw(st.booleans())
    day_text, day_holds = data.draw(weekdays() if on_weekdays else month_days_rule())
    month_text, month_holds = data.draw(listed("month"))
    year_text, year_holds = data.draw(st.one_of(st.just(("*", lambda y: True)), listed("year", 2023, 2027)))
    fields = ["?", day_text] if on_weekdays else [day_text, "?"]
    schedule = f"0 0 12 {fields[0]} {month_text} {fields[1]} {year_text}"
    days = (FIRST_DAY + timedelta(days=n) for n in range((LAST_DAY - FIRST_DAY).days + 1))
    expected = [d for d in days if day_holds(d) and month_holds(d.month) and year_holds(d.year)]
    start, end = datetime.combine(FIRST_DAY, time(), UTC), datetime.combine(LAST_DAY, time(23), UTC)
    found: list[date] = []
    walk = croniter(cron_expression(schedule), start, max_years_between_matches=CRONITER_YEARS)
    with contextlib.suppress(CroniterBadDateError):  # no fire after the last found
        while (fire := walk.get_next(datetime)) <= end:
            assert fire.time() == time(12), schedule
            found.append(fire.date())
    assert found == expected, f"{schedule} -> {cron_expression(schedule)}"


@PROPERTY
@given(
    seconds=listed("second"),
    minutes=listed("minute"),
    hours=listed("hour"),
    after=st.integers(0, 86_399),
)
def test_quartz_times_of_day_fire_as_quartz_reads_them(
    seconds: Field, minutes: Field, hours: Field, after: int
) -> None:
    schedule = f"{seconds[0]} {minutes[0]} {hours[0]} * * ?"
    day = datetime(2024, 2, 28, tzinfo=UTC)
    held = [[v for v in range(n) if f[1](v)] for n, f in ((24, hours), (60, minutes), (60, seconds))]
    start = day + timedelta(seconds=after)
    at = (
        day + timedelta(days=n, hours=h, minutes=m, seconds=s)
        for n, h, m, s in itertools.product(range(2), *held)
    )
    expected = list(itertools.islice((t for t in at if t > start), 40))
    found = fires(schedule, start, count=len(expected))
    assert found == expected, f"{schedule} -> {cron_expression(schedule)}"

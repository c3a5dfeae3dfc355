"""The rules a table can list, each a frozen model validated on load."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from croniter import CroniterBadDateError, croniter
from pydantic import BeforeValidator, Field, field_validator, model_validator

from compactor.config.units import ByteSize, Duration, Frozen
from compactor.domain.calendar import Level

Trigger = Literal["on_load", "manual"]


class Sealing(Frozen):
    """Late data for a time-layer table: loads that overlap data already there wait, then fold in.

    The watermark is the latest event end held minus `allowed_lateness`; data ending
    at or before it is sealed. A load overlapping data already there is late: it
    waits beside what it overlaps and is folded in when the late bytes reach
    `late_fold_ratio` x those bytes, or `max_late_segments` wait.
    """

    allowed_lateness: Duration = timedelta(0)
    """The watermark trails the latest event end the table holds by this much; data ending at or
    before the watermark is sealed."""
    late_fold_ratio: float = Field(default=0.1, gt=0)
    """A sealed late run folds into its host once its late bytes reach this share of the host's
    bytes (r: a late byte is rewritten at most 1 + 1/r times)."""
    max_late_segments: int = Field(default=16, ge=1)
    """A sealed late run also folds once it holds this many late segments, whatever their bytes."""

    @field_validator("allowed_lateness")
    @classmethod
    def _not_negative(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise ValueError(f"allowed_lateness {value} is negative")
        return value


_QUARTZ_BOUNDS = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (1, 7),  # Quartz counts from Sunday = 1; cron from Sunday = 0
    "year": (1970, 2099),  # Quartz reads a century ahead, croniter up to 2099
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_QUARTZ_NAMES = {
    "month": {m: n for n, m in enumerate(_MONTHS, 1)},
    "day-of-week": {d: n for n, d in enumerate(_WEEKDAYS, 1)},
}
_NUMBER = re.compile(r"[0-9]+")
_LAST_OR_NTH = re.compile(r"([0-9]+|[A-Z]{3})(?:L|#([0-9]+))")
CRONITER_YEARS = 2099 - 1970 + 1
"""How many years croniter searches for a fire: all it reads, so a schedule for 2090 is found and
one that never fires again (its years are past, or `0 0 12 30 2 ?`) ends its search."""


def cron_expression(schedule: str) -> str:
    """A schedule as croniter reads it. Standard cron (five fields; a sixth gives seconds) is
    taken as it is. Quartz's form, as Pinot writes it (seconds first, `?` for "no specific value"
    in one of day-of-month and day-of-week, days of the week 1-7 from Sunday, an optional year)
    is spelled out value by value, seconds moved last and the year kept: `0 */30 * * * ?` ->
    `0,30 * * * * 0`; `0 0 12 ? * 6#3` (the third Friday) -> `0 12 * * 5#3 0`; `6L` (the last
    Friday) -> `L5`. Raises ValueError naming the field and value of a Quartz form croniter
    cannot express (`L-3`, `LW`, `30W`, `#` or `L` in a list) or Quartz refuses."""
    fields = schedule.split()
    if len(fields) != 7 and not (len(fields) == 6 and "?" in schedule):
        return schedule  # croniter's own (it reads a `?` as `*`)
    second, minute, hour, day, month, weekday, *year = schedule.upper().split()
    if (day == "?") == (weekday == "?"):
        raise ValueError(
            f"day-of-month `{day}` and day-of-week `{weekday}`: Quartz takes `?` in exactly one of them"
        )
    expression = [
        _cron_list("minute", _quartz_values("minute", minute)),
        _cron_list("hour", _quartz_values("hour", hour)),
        _cron_day(day),
        _cron_list("month", _quartz_values("month", month)),
        _cron_weekday(weekday),
        _cron_list("second", _quartz_values("second", second)),
    ]
    years = _quartz_values("year", year[0]) if year else None
    if years is not None:
        expression.append(_cron_list("year", years))
    return " ".join(expression)


def _cron_day(text: str) -> str:
    if text == "?":
        return "*"
    if text == "L":
        return "l"
    if "L" in text or "W" in text:
        nearest = re.fullmatch(r"([0-9]+)W", text)
        if nearest is None:
            raise ValueError(
                f"day-of-month `{text}`: croniter reads `L` (the last day) and `nW` (the weekday "
                "nearest day n) alone; not `L-n`, `LW`, nor either in a list or range"
            )
        if not 1 <= int(nearest.group(1)) <= 28:
            raise ValueError(
                f"day-of-month `{text}`: the weekday nearest a day some months lack is not "
                "supported (Quartz skips those months, croniter takes their last day); use 1W-28W"
            )
        return f"{int(nearest.group(1))}w"
    return _cron_list("day-of-month", _quartz_values("day-of-month", text))


def _cron_weekday(text: str) -> str:
    """Quartz's day-of-week as croniter's: each day one less (Sunday: 1 -> 0), never a `#n` or a
    step; `nL` (the last day n of the month) -> `L(n-1)`, `n#k` (its k-th) -> `(n-1)#k`."""
    if text == "?":
        return "*"
    if text == "L":
        return "6"  # alone, Quartz's `L` is the week's last day, Saturday (7)
    if "L" in text or "#" in text:
        special = _LAST_OR_NTH.fullmatch(text)
        if special is None:
            raise ValueError(
                f"day-of-week `{text}`: `nL` (the last day n of the month) and `n#k` (its k-th) "
                "take one day alone, not a list, range or step"
            )
        day = _quartz_value("day-of-week", special.group(1), text) - 1
        if special.group(2) is None:
            return f"L{day}"
        if not 1 <= int(special.group(2)) <= 5:
            raise ValueError(f"day-of-week `{text}`: the week after `#` is 1-5")
        return f"{day}#{int(special.group(2))}"
    return _cron_list("day-of-week", _quartz_values("day-of-week", text), shift=1)


def _cron_list(field: str, values: set[int] | None, shift: int = 0) -> str:
    """`*` for every value of the field, else the values, each less `shift`, listed."""
    low, high = _QUARTZ_BOUNDS[field]
    if values is None or len(values) == high - low + 1:
        return "*"
    return ",".join(str(v - shift) for v in sorted(values))


def _quartz_values(field: str, text: str) -> set[int] | None:
    """The values a Quartz field lists (None: `*`, every one): a list of values, ranges
    (`FRI-MON` wraps past the field's end, as Quartz does) and steps (`2/2`: from 2, every other
    one to the field's end; `*/15`; `10-40/10`)."""
    if text == "*":
        return None
    values: set[int] = set()
    for term in text.split(","):
        if not term:
            raise ValueError(f"{field} `{text}`: an empty item in the list")
        values |= _quartz_term(field, term)
    return values


def _quartz_term(field: str, term: str) -> set[int]:
    low, high = _QUARTZ_BOUNDS[field]
    span, slash, step_text = term.partition("/")
    step = 1
    if slash:
        if not _NUMBER.fullmatch(step_text) or int(step_text) == 0:
            raise ValueError(f"{field} `{term}`: the step after `/` is a whole number from 1")
        if any(name in span for name in _QUARTZ_NAMES.get(field, {})):
            raise ValueError(f"{field} `{term}`: Quartz ignores a step after a name; write the numbers")
        step = int(step_text)
    first_text, dash, last_text = span.partition("-")
    if first_text == "*" and not dash:
        first, last = low, high
    else:
        first = _quartz_value(field, first_text, term)
        last = _quartz_value(field, last_text, term) if dash else high if slash else first
    if last < first:
        if field == "year":
            raise ValueError(f"year `{term}` runs backwards")
        last += high - low + 1  # Quartz goes on past the field's end and around: 22-2 is 22,23,0,1,2
    size = high - low + 1
    return {low + (v - low) % size for v in range(first, last + 1, step)}


def _quartz_value(field: str, text: str, term: str) -> int:
    names = _QUARTZ_NAMES.get(field, {})
    if text in names:
        return names[text]
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{field} `{term}`: `{text}` is not a {field} value")
    low, high = _QUARTZ_BOUNDS[field]
    if not low <= int(text) <= high:
        raise ValueError(f"{field} `{term}`: {int(text)} is out of its range {low}-{high}")
    return int(text)


def next_fire(schedule: str, after: datetime) -> datetime | None:
    """The first time after `after` at which `schedule` fires; None when it never fires again (its
    years are past, or its day never comes, as February 30)."""
    fires = croniter(cron_expression(schedule), after, max_years_between_matches=CRONITER_YEARS)
    try:
        fire: datetime = fires.get_next(datetime)
    except CroniterBadDateError:
        return None
    return fire


class RuleBase(Frozen):
    """What every rule takes: when it runs on its own (each load, or only when asked), and a
    cron `schedule` on which it also runs (`0 2 * * *`: nightly at 02:00 UTC; a sixth field
    gives seconds; Quartz's form, seconds first, as Pinot writes it: `0 */30 * * * ?`)."""

    trigger: Trigger = "on_load"
    """`on_load`: evaluated on every completion event; `manual`: only when asked
    (`compactor request --rule`) or on its `schedule`."""
    schedule: str | None = None
    """A cron expression (UTC) on which the rule also runs, e.g. `0 2 * * *` for nightly at 02:00
    (a sixth field gives seconds), or Quartz's form as Pinot writes it, seconds first with `?`
    (`0 */30 * * * ?`: every 30 minutes; `0 0 12 ? * 6#3`: noon on the third Friday; an optional
    year); fires missed while the job was down are not made up."""

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            expression = cron_expression(value)
        except ValueError as exc:
            raise ValueError(f"schedule {value!r} (Quartz's seconds-first form): {exc}") from None
        if not croniter.is_valid(expression):
            raise ValueError(
                f"schedule {value!r} is not a cron expression (minute hour day month weekday, "
                "optionally seconds as a sixth field; or Quartz's seconds-first form with `?`)"
            )
        return value


class AutoMergeRule(RuleBase):
    """Time-layer auto-merge (Kylin): natural levels, largest first, one merge per attempt."""

    rule: Literal["auto_merge"]
    """Selects this rule."""
    levels: tuple[Level, ...] = (Level.WEEK, Level.MONTH)
    """The natural time layers to merge into, each listed once; tried from the largest down."""
    sealing: Sealing | None = None
    """Accept late loads that overlap data already there and fold them in by ratio; null:
    overlapping loads are refused (`overlapping_range`)."""

    @field_validator("levels")
    @classmethod
    def _levels_present(cls, levels: tuple[Level, ...]) -> tuple[Level, ...]:
        if not levels:
            raise ValueError("select at least one level (hour, day, week, month, quarter, year)")
        if len(set(levels)) != len(levels):
            raise ValueError("each level may be listed once")
        return levels

    @property
    def name(self) -> str:
        return self.rule


class MinorRule(RuleBase):
    """Level-threshold compaction (CarbonData minor): x loads -> level 1, y level-1 -> level 2."""

    rule: Literal["minor"]
    """Selects this rule."""
    level_thresholds: tuple[int, int] = (4, 3)
    """`[x, y]`: every x level-0 segments (in load order) merge into a level-1 segment, every y
    level-1 segments into a final level-2 one; 0 disables a level, 1 is refused."""
    cores_while_compacting: int | None = Field(default=2, ge=1)
    """CarbonData's `carbon.number.of.cores.while.compacting` (its default: 2): the rule's merges
    run in a Spark FAIR pool named after the rule with this minShare; null: Spark's default pool."""

    @field_validator("level_thresholds")
    @classmethod
    def _thresholds(cls, value: tuple[int, int]) -> tuple[int, int]:
        for n in value:
            if not 0 <= n <= 100:
                raise ValueError(f"each threshold must be 0..100 (0 disables the level), got {n}")
            if n == 1:
                # CarbonData's range is 0..100, but a group of one merges nothing: each segment
                # would be copied byte for byte only to raise its level
                raise ValueError(
                    "a threshold of 1 is refused: it would rewrite every segment alone into the next "
                    "level, copying its bytes without merging anything; use 0 to disable the level, "
                    "or 2..100 segments per merge"
                )
        return value


class MajorRule(RuleBase):
    """Size-threshold compaction (CarbonData major): segments summing below the threshold merge."""

    rule: Literal["major"]
    """Selects this rule."""
    size_threshold: ByteSize = 1024 << 20
    """Oldest first, a segment that would bring the running total to or above this size is
    skipped; what was collected (at least two segments) merges."""
    cores_while_compacting: int | None = Field(default=2, ge=1)
    """As for `minor` (default 2): the merges run in a Spark FAIR pool named `major` with this
    minShare; null: Spark's default pool."""


ScaleProfile = Literal["I", "II", "III"]


class Resources(Frozen):
    """What a pool's merges get: how many run at once (its share of
    `operations.max_concurrent_merges`) and their Spark FAIR pool's weight and minShare."""

    concurrency: int | None = None
    """How many of the pool's merges run at once; None: any free slot."""
    weight: int = 1
    """The Spark FAIR pool's weight."""
    min_share: int = 0
    """The Spark FAIR pool's minShare."""


# The scale profiles I, II and III of Hydrolix's merge pools (small, medium, large merge peers),
# as slots and FAIR shares: small merges may take any free slot and get twice the executors'
# share; a large pool runs one merge at a time, so it never holds more than one slot.
SCALE_PROFILES: dict[str, Resources] = {
    "I": Resources(concurrency=None, weight=2, min_share=1),
    "II": Resources(concurrency=2, weight=1, min_share=1),
    "III": Resources(concurrency=1, weight=1, min_share=0),
}

# The job's own FAIR pools, declared beside the tables' so that `compactor run` always schedules
# FAIR: merges without a pool of their own share Spark's "default" pool side by side (in FIFO the
# first merge's tasks held every core), and a checkpoint ("upkeep") or a VACUUM gets half of what
# those merges get instead of a place in the queue in front of them.
UPKEEP_POOL = "upkeep"
VACUUM_POOL = "vacuum"
JOB_POOLS: dict[str, Resources] = {
    "default": Resources(weight=2),
    UPKEEP_POOL: Resources(),
    VACUUM_POOL: Resources(),
}


def _replicas(value: Any) -> int | None:
    """Hydrolix spells replicas `3` or a range `1-5`; a range gives its upper bound."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(value))
    if not match:
        raise ValueError(f"replicas {value!r} is not a number or a range such as 1-5")
    low, high = int(match.group(1)), int(match.group(2) or match.group(1))
    if high < low:
        raise ValueError(f"replicas {value!r}: the range ends below its start")
    return high


class PoolConfig(Frozen):
    """A bin-pack pool: segments whose age, size and width fit it are packed together; its
    merges run with the pool's resources (concurrency, FAIR weight and minShare)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """The pool's name, also the name of the Spark FAIR scheduler pool its merges run in."""

    @field_validator("name")
    @classmethod
    def _not_the_jobs(cls, name: str) -> str:
        if name in JOB_POOLS:
            raise ValueError(f"pool name {name!r} is the job's own Spark pool: choose another")
        return name

    min_age: Duration = timedelta(0)
    """A segment joins the pool once its age (now minus its end) reaches this."""
    max_age: Duration
    """... and while its age is under this."""
    max_size: ByteSize
    """The largest segment the pool takes, and the most bytes one of its merges may produce."""
    max_width: Duration
    """The widest time range a segment, and a merge's output, may span in this pool."""
    scale_profile: ScaleProfile | None = None
    """Hydrolix's scale profile: `I` (any free slot, weight 2, minShare 1), `II` (2 at once,
    weight 1, minShare 1) or `III` (1 at once, weight 1, minShare 0)."""
    replicas: Annotated[int | None, BeforeValidator(_replicas), Field(ge=1)] = None
    """How many of the pool's merges run at once, Hydrolix style: `3`, or a range `1-5` (its upper
    bound counts)."""
    max_concurrent: int | None = Field(default=None, ge=1)
    """How many of the pool's merges run at once; wins over `replicas` and the profile."""
    weight: int | None = Field(default=None, ge=1)
    """The FAIR pool's weight; wins over the profile's."""
    min_share: int | None = Field(default=None, ge=0)
    """The FAIR pool's minShare; wins over the profile's."""

    @model_validator(mode="after")
    def _ranges(self) -> PoolConfig:
        if self.max_age <= self.min_age:
            raise ValueError(f"pool {self.name}: max_age must be greater than min_age")
        if self.max_width <= timedelta(0):
            raise ValueError(f"pool {self.name}: max_width must be positive")
        return self

    @property
    def resources(self) -> Resources:
        """Explicit settings over the scale profile's (none: any free slot, weight 1, minShare 0)."""
        base = SCALE_PROFILES[self.scale_profile] if self.scale_profile else Resources()
        concurrency = self.max_concurrent or self.replicas or base.concurrency
        return Resources(
            concurrency=concurrency,
            weight=self.weight if self.weight is not None else base.weight,
            min_share=self.min_share if self.min_share is not None else base.min_share,
        )


DEFAULT_POOLS: tuple[PoolConfig, ...] = (
    PoolConfig(name="small", min_age=timedelta(0), max_age=timedelta(minutes=10), max_size=1 << 30, max_width=timedelta(hours=1), scale_profile="I"),
    PoolConfig(name="medium", min_age=timedelta(minutes=10), max_age=timedelta(minutes=70), max_size=2 << 30, max_width=timedelta(hours=1), scale_profile="II"),
    PoolConfig(name="large", min_age=timedelta(minutes=70), max_age=timedelta(days=90), max_size=4 << 30, max_width=timedelta(hours=1), scale_profile="III"),
)  # fmt: skip


class BinPackRule(RuleBase):
    """Hydrolix-style merge: pools by age/size/width, packed first-fit or best-fit."""

    rule: Literal["bin_pack"]
    """Selects this rule."""
    strategy: Literal["first_fit", "best_fit"] = "first_fit"
    """How a pool's segments are packed into merges: first-fit or best-fit decreasing."""
    pools: tuple[PoolConfig, ...] = DEFAULT_POOLS
    """The pools, in order: each segment joins the first whose age, size and width it fits. The
    default is `small`, `medium` and `large`, each at most one hour wide."""

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, pools: tuple[PoolConfig, ...]) -> tuple[PoolConfig, ...]:
        if not pools:
            raise ValueError("give at least one pool")
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        return pools


class UpsertCompactionRule(RuleBase):
    """Upsert compaction (Pinot): drop rows a newer version of their key supersedes, merge M:1.

    A segment qualifies when its invalid rows reach both thresholds; a small
    segment (under half of both output limits in valid rows and bytes) qualifies
    too, to be merged with others. Qualifying segments merge M:1 in load order,
    each output's valid rows within `max_records_per_segment` and its size
    within `max_segment_size`; a lone segment is rewritten only to drop invalid
    rows. Never splits, repartitions or rolls up.
    """

    rule: Literal["upsert_compaction"]
    """Selects this rule."""
    invalid_records_threshold_percent: float = Field(default=0.0, ge=0, le=100)
    """A segment qualifies when at least this percentage of its rows are superseded (and the count
    below is reached too)."""
    invalid_records_threshold_count: int = Field(default=1, ge=1)
    """... and at least this many of its rows are superseded."""
    max_records_per_segment: int = Field(default=5_000_000, gt=0)
    """The most valid rows an output segment holds."""
    max_segment_size: ByteSize = 500 << 20
    """The largest output segment."""


ROLLUPS = ("sum", "min", "max", "distinct_count_hll")


class RefreshRule(RuleBase):
    """Segment refresh (Pinot SegmentRefreshTask): rewrite segments that do not match the layout,
    resized toward the targets, with optional rollup or dedup."""

    rule: Literal["refresh"]
    """Selects this rule."""
    skip_index_check: bool = False
    """Trust the layout each segment recorded and skip reading its files and rows (cheaper, but
    blind to drift the record does not show)."""
    max_records_per_segment: int = Field(default=5_000_000, gt=0)
    """Outputs are split into chunks that approach this many rows."""
    desired_segment_size: ByteSize = 500 << 20
    """Outputs are split into chunks that approach this size; conforming small segments of one
    time bucket merge toward it."""
    max_records_per_task: int = Field(default=50_000_000, gt=0)
    """The most input rows one task (one Delta commit) rewrites."""
    max_data_size_per_task: ByteSize = 5 << 30
    """The most input bytes one task rewrites."""
    table_max_num_tasks: int = Field(default=10, gt=0)
    """The most tasks per evaluation; the rest waits for the next one."""
    merge_type: Literal["concat", "rollup", "dedup"] = "concat"
    """`concat` keeps every row; `rollup` combines rows with equal dimensions (needs
    `aggregations`); `dedup` drops duplicate rows."""
    round_bucket_time_period: Duration | None = None
    """Round the time column down to this period before rolling up or de-duplicating."""
    aggregations: Mapping[str, str] = Field(default_factory=dict)
    """Metric column -> how rolled-up rows combine it: `sum`, `min`, `max`, or `distinct_count_hll`
    for a column of HyperLogLog sketches (rolled-up rows hold their union); `count` is refused."""

    @field_validator("aggregations")
    @classmethod
    def _aggregations(cls, aggregations: Mapping[str, str]) -> Mapping[str, str]:
        for column, how in aggregations.items():
            if how == "count":
                raise ValueError(
                    f"{column}: count is refused: rolling up already rolled-up rows would count them again; "
                    "load a column of 1 per row and roll it up with sum"
                )
            if how not in ROLLUPS:
                raise ValueError(f"{column}: {how!r} is not one of {', '.join(ROLLUPS)}")
        return aggregations

    @model_validator(mode="after")
    def _rollup(self) -> RefreshRule:
        if self.merge_type == "rollup" and not self.aggregations:
            raise ValueError(f"merge_type rollup needs `aggregations` (metric column: {', '.join(ROLLUPS)})")
        if self.max_records_per_task < self.max_records_per_segment:
            raise ValueError(
                "max_records_per_task must be at least max_records_per_segment, or no task could build one full segment"
            )
        return self


RuleConfig = Annotated[
    AutoMergeRule | MinorRule | MajorRule | BinPackRule | UpsertCompactionRule | RefreshRule,
    Field(discriminator="rule"),
]


class RuleName(StrEnum):
    """Every rule's name, as tables list it; `rules.registry` maps each to its planner."""

    AUTO_MERGE = "auto_merge"
    MINOR = "minor"
    MAJOR = "major"
    BIN_PACK = "bin_pack"
    UPSERT_COMPACTION = "upsert_compaction"
    REFRESH = "refresh"


RULE_NAMES = tuple(str(name) for name in RuleName)

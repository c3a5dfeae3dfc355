"""The rules a table can list, each a frozen model validated on load."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from croniter import croniter
from pydantic import BeforeValidator, Field, field_validator, model_validator

from compactor.config.units import ByteSize, Duration, Frozen
from compactor.domain.calendar import Level

Trigger = Literal["on_load", "manual"]


class Sealing(Frozen):
    """Late data for a time-layer table (see `rules.late_data`).

    The watermark is the latest event end held minus `allowed_lateness`; data ending
    at or before it is sealed. A load overlapping data already there is late: it
    waits beside what it overlaps and is folded in when the late bytes reach
    `late_fold_ratio` x those bytes, or `max_late_segments` wait.
    """

    allowed_lateness: Duration = timedelta(0)
    late_fold_ratio: float = Field(default=0.1, gt=0)
    max_late_segments: int = Field(default=16, ge=1)

    @field_validator("allowed_lateness")
    @classmethod
    def _not_negative(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise ValueError(f"allowed_lateness {value} is negative")
        return value


class RuleBase(Frozen):
    """What every rule takes: when it runs on its own (each load, or only when asked), and a
    cron `schedule` on which it also runs (`0 2 * * *`: nightly at 02:00 UTC; a sixth field
    gives seconds)."""

    trigger: Trigger = "on_load"
    schedule: str | None = None

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(
                f"schedule {value!r} is not a cron expression (minute hour day month weekday, "
                "and optionally seconds as a sixth field)"
            )
        return value


class AutoMergeRule(RuleBase):
    """Time-layer auto-merge (Kylin): natural levels, largest first, one merge per attempt."""

    rule: Literal["auto_merge"]
    levels: tuple[Level, ...] = (Level.WEEK, Level.MONTH)
    # accept late loads that overlap sealed data and fold them in by ratio; null: overlaps are refused
    sealing: Sealing | None = None

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
    level_thresholds: tuple[int, int] = (4, 3)
    # CarbonData's carbon.number.of.cores.while.compacting: the rule's merges run in a Spark FAIR
    # pool named after the rule, guaranteed this many cores (its minShare); null: the default pool
    cores_while_compacting: int | None = Field(default=None, ge=1)

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
    size_threshold: ByteSize = 1024 << 20
    cores_while_compacting: int | None = Field(default=None, ge=1)  # as minor's


ScaleProfile = Literal["I", "II", "III"]


class Resources(Frozen):
    """What a pool's merges get: how many run at once (its share of
    `operations.max_concurrent_merges`) and their Spark FAIR pool's weight and minShare."""

    concurrency: int | None = None  # None: any free slot
    weight: int = 1
    min_share: int = 0


# Seed 003's scale profiles I, II and III (small, medium, large merge peers), as slots and FAIR
# shares: small merges may take any free slot and get twice the executors' share; a large
# pool runs one merge at a time, so it never holds more than one slot.
SCALE_PROFILES: dict[str, Resources] = {
    "I": Resources(concurrency=None, weight=2, min_share=1),
    "II": Resources(concurrency=2, weight=1, min_share=1),
    "III": Resources(concurrency=1, weight=1, min_share=0),
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
    merges run with the pool's resources (`resources`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    min_age: Duration = timedelta(0)
    max_age: Duration
    max_size: ByteSize
    max_width: Duration
    scale_profile: ScaleProfile | None = None
    replicas: Annotated[int | None, BeforeValidator(_replicas), Field(ge=1)] = None
    max_concurrent: int | None = Field(default=None, ge=1)  # wins over replicas
    weight: int | None = Field(default=None, ge=1)
    min_share: int | None = Field(default=None, ge=0)

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
    strategy: Literal["first_fit", "best_fit"] = "first_fit"
    pools: tuple[PoolConfig, ...] = DEFAULT_POOLS

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
    invalid_records_threshold_percent: float = Field(default=0.0, ge=0, le=100)
    invalid_records_threshold_count: int = Field(default=1, ge=1)
    max_records_per_segment: int = Field(default=5_000_000, gt=0)
    max_segment_size: ByteSize = 500 << 20


ROLLUPS = ("sum", "min", "max", "distinct_count_hll")


class RefreshRule(RuleBase):
    """Segment refresh (Pinot SegmentRefreshTask): rewrite segments that do not match the layout,
    resized toward the targets, with optional rollup or dedup."""

    rule: Literal["refresh"]
    skip_index_check: bool = False
    max_records_per_segment: int = Field(default=5_000_000, gt=0)
    desired_segment_size: ByteSize = 500 << 20
    max_records_per_task: int = Field(default=50_000_000, gt=0)
    max_data_size_per_task: ByteSize = 5 << 30
    table_max_num_tasks: int = Field(default=10, gt=0)
    merge_type: Literal["concat", "rollup", "dedup"] = "concat"
    round_bucket_time_period: Duration | None = None
    # metric column -> how rolled-up rows combine it: sum, min, max, or distinct_count_hll (the
    # column holds HyperLogLog sketches, e.g. from Spark's hll_sketch_agg, and rolled-up rows hold
    # their union)
    aggregations: Mapping[str, str] = Field(default_factory=dict)

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

"""Table config: YAML -> validated, frozen objects.

Shape (the contract): a `defaults` block applies to every table; a table under
`tables` replaces any key it gives. Unknown keys and impossible values are
refused with an error naming the table, the key, the value and why.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from compactor.calendar import Level
from compactor.domain import TABLE_NAME
from compactor.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_DURATION_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(value: Any) -> timedelta:
    """`30d`, `12h`, `15m`, `90s` -> timedelta (a bare number is seconds)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return timedelta(seconds=value)
    match = _DURATION.match(str(value))
    if not match:
        if isinstance(value, str) and value.lstrip("-").startswith("P"):  # ISO 8601, as JSON exports it
            return TypeAdapter(timedelta).validate_python(value)
        raise ValueError(f"{value!r} is not a duration; use a whole number with s, m, h or d")
    amount, unit = match.groups()
    return timedelta(**{_DURATION_UNITS[unit]: int(amount)})


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$", re.IGNORECASE)
# As in the seeds, MB means 1024 * 1024 bytes; KiB/MiB/GiB are accepted as the same units.
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}


def parse_size(value: Any) -> int:
    """`1024MB`, `1.5GB`, `512KiB`, `100` (bytes) -> bytes (MB = 1024 * 1024 bytes)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size; use a number with B, KB, MB, GB, KiB, MiB or GiB")
    amount, unit = match.groups()
    return int(float(amount) * _SIZE_UNITS[(unit or "b").lower().replace("i", "")])


def _size(value: Any) -> int:
    size = parse_size(value)
    if size <= 0:
        raise ValueError("must be a positive size")
    return size


def _duration(value: Any) -> timedelta:
    return parse_duration(value)


ByteSize = Annotated[int, BeforeValidator(_size)]
Duration = Annotated[timedelta, BeforeValidator(_duration)]
Trigger = Literal["on_load", "manual"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AutoMergeRule(_Frozen):
    """Time-layer auto-merge (Kylin): natural levels, largest first, one merge per attempt."""

    rule: Literal["auto_merge"]
    levels: tuple[Level, ...] = (Level.WEEK, Level.MONTH)
    trigger: Trigger = "on_load"

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


class MinorRule(_Frozen):
    """Level-threshold compaction (CarbonData minor): x loads -> level 1, y level-1 -> level 2."""

    rule: Literal["minor"]
    level_thresholds: tuple[int, int] = (4, 3)
    trigger: Trigger = "on_load"

    @field_validator("level_thresholds")
    @classmethod
    def _thresholds(cls, value: tuple[int, int]) -> tuple[int, int]:
        for n in value:
            if not 0 <= n <= 100:
                raise ValueError(f"each threshold must be 0..100 (0 disables the level), got {n}")
            if n == 1:
                raise ValueError(
                    "a threshold of 1 would 'merge' a single segment; use 0 to disable or 2..100"
                )
        return value


class MajorRule(_Frozen):
    """Size-threshold compaction (CarbonData major): segments summing below the threshold merge."""

    rule: Literal["major"]
    size_threshold: ByteSize = 1024 << 20
    trigger: Trigger = "on_load"


class PoolConfig(_Frozen):
    """A bin-pack pool: segments whose age, size and width fit it are packed together."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    min_age: Duration = timedelta(0)
    max_age: Duration
    max_size: ByteSize
    max_width: Duration

    @model_validator(mode="after")
    def _ranges(self) -> PoolConfig:
        if self.max_age <= self.min_age:
            raise ValueError(f"pool {self.name}: max_age must be greater than min_age")
        if self.max_width <= timedelta(0):
            raise ValueError(f"pool {self.name}: max_width must be positive")
        return self


DEFAULT_POOLS: tuple[PoolConfig, ...] = (
    PoolConfig(name="small", min_age=timedelta(0), max_age=timedelta(minutes=10), max_size=1 << 30, max_width=timedelta(hours=1)),
    PoolConfig(name="medium", min_age=timedelta(minutes=10), max_age=timedelta(minutes=70), max_size=2 << 30, max_width=timedelta(hours=1)),
    PoolConfig(name="large", min_age=timedelta(minutes=70), max_age=timedelta(days=90), max_size=4 << 30, max_width=timedelta(hours=1)),
)  # fmt: skip


class BinPackRule(_Frozen):
    """Hydrolix-style merge: pools by age/size/width, packed first-fit or best-fit."""

    rule: Literal["bin_pack"]
    strategy: Literal["first_fit", "best_fit"] = "first_fit"
    pools: tuple[PoolConfig, ...] = DEFAULT_POOLS
    trigger: Trigger = "on_load"

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, pools: tuple[PoolConfig, ...]) -> tuple[PoolConfig, ...]:
        if not pools:
            raise ValueError("give at least one pool")
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        return pools


class UpsertCompactionRule(_Frozen):
    """Upsert compaction (Pinot): drop rows a newer version of their key supersedes, merge M:1.

    A segment qualifies when its invalid rows reach both thresholds; qualifying
    segments merge (or are rewritten alone) so each output's valid rows stay
    within `max_records_per_segment`. Never splits, repartitions or rolls up.
    """

    rule: Literal["upsert_compaction"]
    invalid_records_threshold_percent: float = Field(default=0.0, ge=0, le=100)
    invalid_records_threshold_count: int = Field(default=1, ge=1)
    max_records_per_segment: int = Field(default=5_000_000, gt=0)
    trigger: Trigger = "on_load"


class ColumnConfig(_Frozen):
    """One column of the table's desired schema."""

    type: str = Field(
        pattern=r"^(tinyint|smallint|int|bigint|float|double|boolean|string|binary|date|timestamp|decimal\(\d+,\s*\d+\))$"
    )
    default: Any = None
    multi_value: bool = False


class PartitioningConfig(_Frozen):
    """Value partitioning: each segment holds rows of one partition (function(column) mod n)."""

    column: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    function: Literal["modulo", "murmur"] = "modulo"
    num_partitions: int = Field(gt=0, le=10_000)


class LayoutConfig(_Frozen):
    """How a table's segments must be built (Pinot table config); refresh rewrites the ones that differ."""

    time_column: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    bucket_time_period: Duration
    columns: Mapping[str, ColumnConfig] = Field(min_length=1)
    partitioning: PartitioningConfig | None = None
    sorted_column: str | None = None
    encoding: Literal["dictionary", "plain"] = "dictionary"
    compression: Literal["snappy", "zstd", "gzip", "uncompressed"] = "snappy"

    @model_validator(mode="after")
    def _columns_exist(self) -> LayoutConfig:
        for role, column in (
            ("time_column", self.time_column),
            ("sorted_column", self.sorted_column),
            ("partitioning.column", self.partitioning.column if self.partitioning else None),
        ):
            if column is not None and column not in self.columns:
                raise ValueError(f"{role} {column!r} is not one of the columns {sorted(self.columns)}")
        if self.bucket_time_period <= timedelta(0):
            raise ValueError("bucket_time_period must be positive")
        return self


class RefreshRule(_Frozen):
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
    aggregations: Mapping[str, Literal["sum", "min", "max"]] = Field(default_factory=dict)
    trigger: Trigger = "on_load"

    @model_validator(mode="after")
    def _rollup(self) -> RefreshRule:
        if self.merge_type == "rollup" and not self.aggregations:
            raise ValueError("merge_type rollup needs `aggregations` (metric column: sum, min or max)")
        if self.max_records_per_task < self.max_records_per_segment:
            raise ValueError(
                "max_records_per_task must be at least max_records_per_segment, or no task could build one full segment"
            )
        return self


RuleConfig = Annotated[
    AutoMergeRule | MinorRule | MajorRule | BinPackRule | UpsertCompactionRule | RefreshRule,
    Field(discriminator="rule"),
]
RULE_NAMES = ("auto_merge", "minor", "major", "bin_pack", "upsert_compaction", "refresh")


class UpsertConfig(_Frozen):
    """An upsert table: the latest row per primary key (by `comparison_column`) is the valid one."""

    primary_key: tuple[str, ...] = Field(min_length=1)
    comparison_column: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

    @field_validator("primary_key")
    @classmethod
    def _columns(cls, columns: tuple[str, ...]) -> tuple[str, ...]:
        for c in columns:
            if not TABLE_NAME.match(c):
                raise ValueError(f"primary key column {c!r} is not a plain column name")
        return columns


MAX_SUB_PARTITION_VALUES = 2000
SubPartitionType = Literal[
    "tinyint", "smallint", "int", "integer", "bigint", "double", "decimal",
    "timestamp", "date", "varchar", "string", "char", "boolean",
]  # fmt: skip
_INT_RANGES = {"tinyint": 7, "smallint": 15, "int": 31, "integer": 31, "bigint": 63}


def parse_sub_partition_value(kind: str, text: str) -> object:
    """The typed value of a sub-partition given as text; ValueError when it is not one."""
    if kind in _INT_RANGES:
        number, bits = int(text), _INT_RANGES[kind]
        if not -(2**bits) <= number < 2**bits:
            raise ValueError(f"{text!r} is out of range for {kind}")
        return number
    if kind == "double":
        return float(text)
    if kind == "decimal":
        return Decimal(text)
    if kind == "boolean":
        if text not in ("true", "false"):
            raise ValueError(f"{text!r} is not a boolean; use true or false")
        return text == "true"
    if kind == "date":
        return date.fromisoformat(text)
    if kind == "timestamp":
        return datetime.fromisoformat(text)
    return text


class SubPartitionConfig(_Frozen):
    """A second partition level under time (Kylin multi-level partitioning).

    Values match exactly and case-sensitively; declaring a value no data has yet
    is allowed. Values are written as text and must parse as `type`.
    """

    column: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    type: SubPartitionType = "string"
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values(self) -> SubPartitionConfig:
        if len(self.values) > MAX_SUB_PARTITION_VALUES:
            raise ValueError(
                f"{len(self.values)} sub-partition values declared; at most {MAX_SUB_PARTITION_VALUES} are supported"
            )
        seen: set[str] = set()
        for value in self.values:
            if value in seen:
                raise ValueError(f"sub-partition value {value!r} is declared twice")
            seen.add(value)
            try:
                parse_sub_partition_value(self.type, value)
            except (ValueError, ArithmeticError) as exc:
                raise ValueError(f"sub-partition value {value!r} is not a valid {self.type}: {exc}") from None
        return self

    def sql_literal(self, value: str) -> str:
        """A SQL literal of `value` in the column's type (for Delta predicates)."""
        parse_sub_partition_value(self.type, value)  # refuses anything that is not a value
        quoted = "'" + value.replace("'", "''") + "'"
        kind = {"integer": "int", "varchar": "string", "char": "string"}.get(self.type, self.type)
        return f"CAST({quoted} AS {kind})"


class TableSettings(_Frozen):
    """The effective settings of one table after defaults are applied."""

    merge_enabled: bool = True
    preserve_latest: int = Field(default=0, ge=0)
    allowed_compaction_days: int = Field(default=0, ge=0)
    lookback: timedelta | None = None
    rules: tuple[RuleConfig, ...] = (AutoMergeRule(rule="auto_merge"),)
    sub_partition: SubPartitionConfig | None = None
    upsert: UpsertConfig | None = None
    config_version: int = Field(default=1, ge=1)
    layout: LayoutConfig | None = None

    @model_validator(mode="after")
    def _upsert_rule_needs_keys(self) -> TableSettings:
        refresh = [r for r in self.rules if isinstance(r, RefreshRule)]
        if refresh and self.layout is None:
            raise ValueError(
                "the refresh rule needs the table's `layout` (time_column, bucket_time_period, columns)"
            )
        for rule in refresh:
            for metric in rule.aggregations:
                if self.layout is not None and metric not in self.layout.columns:
                    raise ValueError(f"aggregation column {metric!r} is not a layout column")
        if any(r.rule == "upsert_compaction" for r in self.rules) and self.upsert is None:
            raise ValueError(
                "upsert_compaction needs the table's `upsert` block (primary_key, comparison_column)"
            )
        if self.upsert is not None and any(
            r.rule in {"minor", "major", "bin_pack", "auto_merge"} for r in self.rules
        ):
            raise ValueError(
                "an upsert table may only use upsert_compaction: other rules would merge without removing "
                "superseded rows"
            )
        return self

    @field_validator("rules")
    @classmethod
    def _one_of_each(cls, rules: tuple[RuleConfig, ...]) -> tuple[RuleConfig, ...]:
        names = [r.rule for r in rules]
        if len(set(names)) != len(names):
            raise ValueError(f"each rule may be listed once per table, got {names}")
        if "auto_merge" in names and len(names) > 1:
            # minor, major and bin_pack merge segments that are not adjacent in time; the
            # output spans the gap, and a segment filling it later would overlap it
            raise ValueError(
                f"auto_merge needs disjoint, contiguous segments and cannot share a table with {names}: "
                "the other rules merge across gaps and would create overlapping ranges"
            )
        return rules

    @field_validator("lookback", mode="before")
    @classmethod
    def _lookback(cls, value: Any) -> timedelta | None:
        if value is None or value == "off" or value is False:
            return None
        duration = parse_duration(value)
        if duration <= timedelta(0):
            raise ValueError("lookback must be positive (or `off`)")
        return duration

    @property
    def needs_disjoint_ranges(self) -> bool:
        """Time-layer rules cannot reason about overlapping segments."""
        return any(r.rule == "auto_merge" for r in self.rules)


class TableOverrides(TableSettings):
    """Table-level keys; only the keys given replace the project defaults."""


def _secret(value: Any) -> Any:
    """`env:NAME` reads the secret from the environment, so it never sits in the file."""
    if isinstance(value, str) and value.startswith("env:"):
        name = value[4:]
        if name not in os.environ:
            raise ValueError(f"environment variable {name} is not set")
        return os.environ[name]
    return value


Secret = Annotated[SecretStr, BeforeValidator(_secret)]


class KafkaSecurity(_Frozen):
    """SASL and SSL settings for every Kafka client (confluent-kafka and Spark's source).

    Secrets are `SecretStr`: printing or logging this object shows `**********`.
    """

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_location: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> KafkaSecurity:
        if self.security_protocol.startswith("SASL") and not (
            self.sasl_mechanism and self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"{self.security_protocol} needs sasl_mechanism, sasl_username and sasl_password"
            )
        return self

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings."""
        config: dict[str, str] = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism and self.sasl_username and self.sasl_password:
            config |= {
                "sasl.mechanisms": self.sasl_mechanism,
                "sasl.username": self.sasl_username,
                "sasl.password": self.sasl_password.get_secret_value(),
            }
        if self.ssl_ca_location:
            config["ssl.ca.location"] = self.ssl_ca_location
        return config

    def java_client(self) -> dict[str, str]:
        """The same settings for the Java client inside Spark's Kafka source (without `kafka.`)."""
        config: dict[str, str] = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism and self.sasl_username and self.sasl_password:
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            user = self.sasl_username.replace('"', '\\"')
            secret = self.sasl_password.get_secret_value().replace('"', '\\"')
            config |= {
                "sasl.mechanism": self.sasl_mechanism,
                "sasl.jaas.config": f'{module} required username="{user}" password="{secret}";',
            }
        if self.ssl_ca_location:
            config |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ssl_ca_location}
        return config


class ProjectConfig(_Frozen):
    """The whole file: project defaults plus per-table overrides."""

    defaults: TableSettings = TableSettings()
    tables: Mapping[str, TableOverrides] = Field(default_factory=dict)
    kafka: KafkaSecurity | None = None

    @field_validator("tables")
    @classmethod
    def _table_names(cls, tables: Mapping[str, TableOverrides]) -> Mapping[str, TableOverrides]:
        for name in tables:
            if not TABLE_NAME.match(name):
                raise ValueError(
                    f"table name {name!r} is invalid: use letters, digits or '_', not starting with a digit"
                )
        return MappingProxyType(dict(tables))  # frozen all the way down

    _effective: dict[str, TableSettings] = PrivateAttr(default_factory=dict)

    def pool_names(self) -> tuple[str, ...]:
        """Every bin-pack pool named anywhere: each becomes a Spark FAIR scheduler pool."""
        settings = [self.defaults, *self.tables.values()]
        names = [p.name for t in settings for r in t.rules if isinstance(r, BinPackRule) for p in r.pools]
        return tuple(dict.fromkeys(names))

    def for_table(self, table: str) -> TableSettings:
        """Effective settings: the table's keys over the project defaults (cached)."""
        found = self._effective.get(table)
        if found is None:
            override = self.tables.get(table)
            if override is None:
                found = self.defaults
            else:
                merged = {name: getattr(self.defaults, name) for name in TableSettings.model_fields}
                merged.update({name: getattr(override, name) for name in override.model_fields_set})
                found = TableSettings(**merged)
            self._effective[table] = found
        return found


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in RULE_NAMES or item in {"function-before[_size()]", "function-before[_duration()]"}:
            continue  # discriminator tags add nothing for the reader
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _describe(error: ValidationError, source: str) -> str:
    lines = [f"invalid config {source}:"]
    for item in error.errors():
        where = _location(item["loc"])
        table = (
            f"table {item['loc'][1]!r}, " if item["loc"][:1] == ("tables",) and len(item["loc"]) > 1 else ""
        )
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        value = repr(item["input"])
        value = value if len(value) <= 200 else value[:200] + f"... ({len(value)} characters)"
        lines.append(f"  {table}key {where}: value {value}: {message}")
    return "\n".join(lines)


def load_config(data: dict[str, Any] | None, source: str = "<dict>") -> ProjectConfig:
    """Validate a parsed document; raise ConfigError with every problem listed."""
    try:
        return ProjectConfig.model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


def load_config_file(path: Path | str) -> ProjectConfig:
    """Read and validate a YAML config file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config {path}: the top level must be a mapping, got {type(data).__name__}")
    return load_config(data, str(path))


def settings_from_json(text: str, table: str) -> TableSettings:
    """A table's settings as `compactor config apply` publishes them; ConfigError if invalid."""
    try:
        return TableSettings.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, f"published for table {table!r}")) from None

"""Table config: YAML -> validated, frozen objects.

Shape (the contract): a `defaults` block applies to every table; a table under
`tables` replaces any key it gives. Unknown keys and impossible values are
refused with an error naming the table, the key, the value and why.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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
        raise ValueError(f"{value!r} is not a duration; use a whole number with s, m, h or d")
    amount, unit = match.groups()
    return timedelta(**{_DURATION_UNITS[unit]: int(amount)})


Duration = Annotated[timedelta, Field(json_schema_extra={"format": "duration"})]
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


RuleConfig = Annotated[AutoMergeRule, Field(discriminator="rule")]


class TableSettings(_Frozen):
    """The effective settings of one table after defaults are applied."""

    merge_enabled: bool = True
    preserve_latest: int = Field(default=0, ge=0)
    allowed_compaction_days: int = Field(default=0, ge=0)
    lookback: timedelta | None = None
    rules: tuple[RuleConfig, ...] = (AutoMergeRule(rule="auto_merge"),)

    @field_validator("lookback", mode="before")
    @classmethod
    def _lookback(cls, value: Any) -> timedelta | None:
        if value is None or value in ("off", False):
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


class ProjectConfig(_Frozen):
    """The whole file: project defaults plus per-table overrides."""

    defaults: TableSettings = TableSettings()
    tables: dict[str, TableOverrides] = Field(default_factory=dict)

    @field_validator("tables")
    @classmethod
    def _table_names(cls, tables: dict[str, TableOverrides]) -> dict[str, TableOverrides]:
        for name in tables:
            if not TABLE_NAME.match(name):
                raise ValueError(
                    f"table name {name!r} is invalid: use letters, digits or '_', not starting with a digit"
                )
        return tables

    def for_table(self, table: str) -> TableSettings:
        """Effective settings: the table's keys over the project defaults."""
        override = self.tables.get(table)
        if override is None:
            return self.defaults
        return self.defaults.model_copy(update=override.model_dump(exclude_unset=True))


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in {"auto_merge"}:
            continue  # discriminator tags add nothing for the reader
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _describe(error: ValidationError, source: str) -> str:
    lines = [f"invalid config {source}:"]
    for item in error.errors():
        where = _location(item["loc"])
        table = f"table {item['loc'][1]!r}, " if item["loc"][:1] == ("tables",) and len(item["loc"]) > 1 else ""
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"  {table}key {where}: value {item['input']!r}: {message}")
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

"""Units in the config: durations (`30d`) and sizes (`1024MB`), and the frozen model base."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter

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
# As in CarbonData's compaction sizes, MB means 1024 * 1024 bytes; KiB/MiB/GiB are accepted as the same units.
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


def _size_or_zero(value: Any) -> int:
    size = parse_size(value)
    if size < 0:
        raise ValueError("must be a size of 0 or more")
    return size


def _duration(value: Any) -> timedelta:
    return parse_duration(value)


ByteSize = Annotated[int, BeforeValidator(_size)]
ByteSizeOrZero = Annotated[int, BeforeValidator(_size_or_zero)]  # 0 turns something off
Duration = Annotated[timedelta, BeforeValidator(_duration)]
COLUMN_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"  # a column a config names


class Frozen(BaseModel):
    """Config objects are immutable and refuse unknown keys.

    Each field's docstring is its description: the generated configuration reference
    (docs/reference/configuration.md) prints it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

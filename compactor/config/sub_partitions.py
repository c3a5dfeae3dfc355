"""Multi-level partitioning: a table's declared sub-partition column and values."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Literal

from pydantic import Field, model_validator

from compactor.config.units import COLUMN_NAME, Frozen

MAX_SUB_PARTITION_VALUES = 2000
SubPartitionType = Literal[
    "tinyint",
    "smallint",
    "int",
    "integer",
    "bigint",
    "double",
    "decimal",
    "timestamp",
    "date",
    "varchar",
    "string",
    "char",
    "boolean",
]
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


class SubPartitionConfig(Frozen):
    """A second partition level under time (Kylin multi-level partitioning).

    Values match exactly and case-sensitively; declaring a value no data has yet
    is allowed. Values are written as text and must parse as `type`.
    """

    column: str = Field(pattern=COLUMN_NAME)
    """The sub-partition column (a region, say)."""
    type: SubPartitionType = "string"
    """The column's type; every value must parse as it."""
    values: tuple[str, ...] = ()
    """The declared values, written as text, each once, at most 2,000; matched exactly and
    case-sensitively; a value no data has yet is allowed."""
    enabled: bool = True
    """false: the table is offline for merges while any segment still holds a value (as Kylin
    takes such a model offline); delete the values, or turn it back on."""
    pushdown: bool = True
    """Whether the query engine may answer from the raw rows what no built index serves (Kylin's
    query pushdown, which its multi-level partitions fall back on); false: `compactor coverage` reports
    such questions as not served."""

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

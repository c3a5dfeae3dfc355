"""How a table's segments must be built (refresh) and how upsert tables pick a row per key."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from compactor.config.units import COLUMN_NAME, Duration, Frozen
from compactor.domain.segments import TABLE_NAME


class ColumnConfig(Frozen):
    """One column of the table's desired schema."""

    type: str = Field(
        pattern=r"^(tinyint|smallint|int|bigint|float|double|boolean|string|binary|date|timestamp|decimal\(\d+,\s*\d+\))$"
    )
    """The column's Spark SQL type: tinyint, smallint, int, bigint, float, double, boolean, string,
    binary, date, timestamp or `decimal(p,s)`."""
    default: Any = None
    """The value a refresh gives the column in segments that lack it."""
    multi_value: bool = False
    """The column holds an array of `type` (Pinot's multi-value column)."""


class PartitioningConfig(Frozen):
    """Value partitioning: each segment holds rows of one partition (function(column) mod n)."""

    column: str = Field(pattern=COLUMN_NAME)
    """The column whose value picks the partition; one of the layout's columns."""
    function: Literal["modulo", "murmur"] = "modulo"
    """How a value maps to a partition: its value modulo the count, or its Murmur hash modulo it."""
    num_partitions: int = Field(gt=0, le=10_000)
    """How many value partitions."""


class LayoutConfig(Frozen):
    """How a table's segments must be built (Pinot table config); refresh rewrites the ones that differ."""

    time_column: str = Field(pattern=COLUMN_NAME)
    """The event-time column; one of `columns`."""
    bucket_time_period: Duration
    """Every output segment holds rows of one bucket of this period (`1d`)."""
    columns: Mapping[str, ColumnConfig] = Field(min_length=1)
    """The table's desired schema: column name -> its type, default and value kind."""
    partitioning: PartitioningConfig | None = None
    """Value partitioning: each segment holds rows of one partition; null: none."""
    sorted_column: str | None = None
    """Rows are sorted by this column within each output; one of `columns`."""
    encoding: Literal["dictionary", "plain"] = "dictionary"
    """The Parquet encoding of the segments' files."""
    compression: Literal["snappy", "zstd", "gzip", "uncompressed"] = "snappy"
    """The Parquet compression codec of the segments' files."""

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


class UpsertConfig(Frozen):
    """An upsert table: the latest row per primary key (by `comparison_column`) is the valid one."""

    primary_key: tuple[str, ...] = Field(min_length=1)
    """The key columns: rows with equal keys are versions of one row."""
    comparison_column: str = Field(pattern=COLUMN_NAME)
    """The row with the highest value here is its key's valid one (ties: the later load, then the
    higher row hash)."""

    @field_validator("primary_key")
    @classmethod
    def _columns(cls, columns: tuple[str, ...]) -> tuple[str, ...]:
        for c in columns:
            if not TABLE_NAME.match(c):
                raise ValueError(f"primary key column {c!r} is not a plain column name")
        return columns

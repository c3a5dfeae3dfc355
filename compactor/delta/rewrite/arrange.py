"""Lay a rewrite's rows out in the table's order, cut into files along it.

`linear` range-partitions by the columns and sorts each file, so files' min/max ranges do not
overlap. `zorder` and `hilbert` compute Delta's own space-filling-curve value (the functions its
`OPTIMIZE ZORDER BY` uses: a range id per column, then interleaved bits or a Hilbert index),
range-partition by it and sort each file by it: rows close on every column share files.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compactor.config.sort import SortConfig
from compactor.delta.files import jvm_class
from compactor.errors import ConfigError

CURVE_KEY = "__compactor_curve"
RANGE_IDS_CONF = "spark.databricks.io.skipping.mdc.rangeId.max"  # Delta's own setting and default
DEFAULT_RANGE_IDS = 1000


def arrange(
    frame: DataFrame,
    order: SortConfig | None,
    files: int,
    table: str,
    handed: Callable[[DataFrame], DataFrame],
) -> DataFrame:
    """`frame` in `files` partitions (one file each), in `order` within and across them; the
    rows as written pass through `handed` once (before a coalesce, which only groups them)."""
    if order is None:
        return handed(frame).coalesce(files)
    missing = [c for c in order.by if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"table {table}: sort.by column(s) {missing} are not in the table's columns {sorted(frame.columns)}"
        )
    keyed, keys = _ordered_by(frame, order)
    spread = keyed.coalesce(1) if files == 1 else keyed.repartitionByRange(files, *keys)
    return handed(spread.sortWithinPartitions(*keys).drop(CURVE_KEY))


def reads_twice(order: SortConfig | None, files: int) -> bool:
    """Whether `arrange` reads its frame twice: a range partitioning (several sorted files, or a
    curve's range ids) first runs a job that samples every row, then the write reads them again."""
    return order is not None and (files > 1 or order.curve != "linear")


def sort_each_file(frame: DataFrame, order: SortConfig | None, first: str) -> DataFrame:
    """Rows sorted within each partition by `first` (a segment id column), then by the order."""
    if order is None:
        return frame
    keyed, keys = _ordered_by(frame, order)
    return keyed.sortWithinPartitions(F.col(first), *keys).drop(CURVE_KEY)


def _ordered_by(frame: DataFrame, order: SortConfig) -> tuple[DataFrame, list[Column]]:
    """The frame and the keys that order it: the columns themselves (linear), or their position
    on the curve in a column of its own (dropping an absent column is a no-op)."""
    if order.curve == "linear":
        return frame, [F.col(c) for c in order.by]
    return frame.withColumn(CURVE_KEY, curve_value(frame, order)), [F.col(CURVE_KEY)]


def curve_value(frame: DataFrame, order: SortConfig) -> Column:
    """The row's position on the curve, from Delta's multi-dimensional clustering functions."""
    spark = frame.sparkSession
    jvm = spark._jvm
    assert jvm is not None
    functions = jvm_class(jvm, "org.apache.spark.sql.delta.skipping.MultiDimClusteringFunctions$")
    mdc = getattr(functions, "MODULE$")
    ranges = int(spark.conf.get(RANGE_IDS_CONF, str(DEFAULT_RANGE_IDS)) or DEFAULT_RANGE_IDS)
    ids = [mdc.range_partition_id(frame[c]._jc, ranges) for c in order.by]
    seq = jvm_class(jvm, "org.apache.spark.api.python.PythonUtils").toSeq(ids)
    if order.curve == "zorder":
        value = mdc.interleave_bits(seq).cast("string")  # as OPTIMIZE ZORDER BY compares it
    else:
        bits = ranges.bit_length()  # bits of the highest range id, as Delta's Hilbert clustering
        value = mdc.hilbert_index(bits, seq)
    return Column(value)

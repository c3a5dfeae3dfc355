"""Rows as a table's layout wants them, and whether making them so changes data."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from compactor.config.layout import LayoutConfig
from compactor.config.rules import RefreshRule
from compactor.delta.paths import SEGMENT_COLUMN


def conform(df: DataFrame, layout: LayoutConfig, rule: RefreshRule) -> DataFrame:
    """Rows as the layout wants them: columns added (default), removed, cast; time rounded;
    rolled up or de-duplicated as `merge_type` says."""
    existing = {f.name: f.dataType for f in df.schema.fields}
    columns = []
    for name, column in layout.columns.items():
        target = f"array<{column.type}>" if column.multi_value else column.type
        if name not in existing:
            value = F.lit(column.default).cast(column.type)
            expr = F.array(value) if column.multi_value and column.default is not None else value
        else:
            expr = F.col(name)
            was_array = isinstance(existing[name], ArrayType)
            if was_array and not column.multi_value:
                expr = F.element_at(expr, 1)
            elif column.multi_value and not was_array:
                expr = F.when(expr.isNull(), F.lit(None)).otherwise(F.array(expr))
        columns.append(expr.cast(target).alias(name))
    out = df.select(*columns)
    if rule.round_bucket_time_period is not None:
        step = int(rule.round_bucket_time_period.total_seconds())
        t = F.col(layout.time_column).cast("timestamp")
        out = out.withColumn(
            layout.time_column, F.timestamp_seconds(F.floor(F.unix_seconds(t) / step) * step)
        )
    if rule.merge_type == "dedup":
        out = out.dropDuplicates()
    elif rule.merge_type == "rollup":
        metrics = dict(rule.aggregations)
        dimensions = [c for c in out.columns if c not in metrics]
        # sum widens decimals and ints; the column keeps the layout's type (Delta has one schema)
        aggregated = [_rolled_up(m, how).cast(out.schema[m].dataType).alias(m) for m, how in metrics.items()]
        out = out.groupBy(*dimensions).agg(*aggregated).select(*layout.columns)
    return out


_ROLLUP = {"sum": F.sum, "min": F.min, "max": F.max, "distinct_count_hll": F.hll_union_agg}


def _rolled_up(column: str, how: str) -> Column:
    """How rolled-up rows combine a metric; sketches of distinct values combine as their union."""
    return _ROLLUP[how](F.col(column))


def changes_data(source: DataFrame, conformed: DataFrame, rule: RefreshRule, table_wide: bool) -> bool:
    """Does the rewrite change rows, or only how they are laid out (split, sorted, encoded)?

    Rollup, dedup and time rounding change rows; so does any column added, dropped or
    retyped, which always shows as a schema difference (and a table-wide rewrite is one).
    """
    if table_wide or rule.merge_type != "concat" or rule.round_bucket_time_period is not None:
        return True
    before = {(f.name, f.dataType.simpleString()) for f in source.schema.fields if f.name != SEGMENT_COLUMN}
    after = {(f.name, f.dataType.simpleString()) for f in conformed.schema.fields}
    return before != after

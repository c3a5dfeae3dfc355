"""Rows as a table's layout wants them, and whether making them so changes data.

On a table with row tracking a rewrite's rows carry their stable row id and commit version
(`DirectTransaction.read`). A refresh keeps them as Delta's own commands do (PROTOCOL.md, "Row
Tracking"): a row copied keeps both; a row updated (its time rounded) keeps its id and takes the
commit's version; a duplicate dropped leaves its survivor's; rolled-up rows are new rows, with
fresh ids.
"""

from __future__ import annotations

from collections.abc import Collection

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from compactor.config.layout import LayoutConfig
from compactor.config.rules import RefreshRule
from compactor.delta.paths import SEGMENT_COLUMN


def conform(
    df: DataFrame, layout: LayoutConfig, rule: RefreshRule, row_tracking: tuple[str, str] | None = None
) -> DataFrame:
    """Rows as the layout wants them: columns added (default), removed, cast; time rounded;
    rolled up or de-duplicated as `merge_type` says. `row_tracking`: the materialised row id
    and row commit version columns `df` carries, kept after the layout's as the module says."""
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
    carried = list(row_tracking or ()) if rule.merge_type != "rollup" else []
    out = df.select(*columns, *(F.col(f"`{c}`") for c in carried))
    if rule.round_bucket_time_period is not None:
        step = int(rule.round_bucket_time_period.total_seconds())
        t = F.col(layout.time_column).cast("timestamp")
        out = out.withColumn(
            layout.time_column, F.timestamp_seconds(F.floor(F.unix_seconds(t) / step) * step)
        )
        if row_tracking is not None and carried:  # an updated row: the commit's version (null)
            version = row_tracking[1]
            tags = out.schema[version].metadata
            out = out.withColumn(version, F.lit(None).cast("long")).withMetadata(version, tags)
    if rule.merge_type == "dedup":
        out = out.dropDuplicates(list(layout.columns))
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


def changes_data(
    source: DataFrame,
    conformed: DataFrame,
    rule: RefreshRule,
    table_wide: bool,
    hidden: Collection[str] = (),
) -> bool:
    """Does the rewrite change rows, or only how they are laid out (split, sorted, encoded)?

    Rollup, dedup and time rounding change rows; so does any column added, dropped or
    retyped, which always shows as a schema difference (and a table-wide rewrite is one).
    `hidden`: columns that are not the table's (row tracking's), left out of the comparison.
    """
    if table_wide or rule.merge_type != "concat" or rule.round_bucket_time_period is not None:
        return True
    left_out = {SEGMENT_COLUMN, *hidden}
    before = {(f.name, f.dataType.simpleString()) for f in source.schema.fields if f.name not in left_out}
    after = {(f.name, f.dataType.simpleString()) for f in conformed.schema.fields if f.name not in left_out}
    return before != after

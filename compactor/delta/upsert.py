"""Reading upsert tables: the latest row per primary key, and invalid-row counts.

Rows of an upsert table carry `_loaded_at`, the load time of the segment that
brought them (merges keep it). The valid row of a key is the one with the
highest comparison value; ties go to the later load, then to the higher row
hash, so every reader and the compactor agree on one winner per key.
"""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from compactor.config.layout import UpsertConfig
from compactor.delta.paths import SEGMENT_COLUMN, table_uri

LOADED_AT_COLUMN = "_loaded_at"
_RANK = "__upsert_rank"


def _winner_order(df: DataFrame, upsert: UpsertConfig) -> list[Column]:
    data = [c for c in df.columns if c not in (SEGMENT_COLUMN, _RANK)]
    return [
        F.col(upsert.comparison_column).desc(),
        F.col(LOADED_AT_COLUMN).desc(),
        F.xxhash64(*data).desc(),
    ]


def with_validity(df: DataFrame, upsert: UpsertConfig) -> DataFrame:
    """`df` plus a boolean column `valid`: is this row its key's latest version?"""
    window = Window.partitionBy(*upsert.primary_key).orderBy(*_winner_order(df, upsert))
    return (
        df.withColumn(_RANK, F.row_number().over(window)).withColumn("valid", F.col(_RANK) == 1).drop(_RANK)
    )


def latest_rows(spark: SparkSession, warehouse: Path | str, table: str, upsert: UpsertConfig) -> DataFrame:
    """The table as readers of an upsert table should see it: one row, the latest, per key."""
    df = DeltaTable.forPath(spark, table_uri(warehouse, table)).toDF()
    return with_validity(df, upsert).where("valid").drop("valid")


def invalid_counts(
    spark: SparkSession, warehouse: Path | str, table: str, upsert: UpsertConfig
) -> dict[str, int]:
    """Invalid (superseded) rows per segment id, from one scan of the current snapshot."""
    df = with_validity(DeltaTable.forPath(spark, table_uri(warehouse, table)).toDF(), upsert)
    rows = df.where(~F.col("valid")).groupBy(SEGMENT_COLUMN).count().collect()
    return {r[SEGMENT_COLUMN]: int(r["count"]) for r in rows}


def valid_rows_of(df: DataFrame, segment_ids: list[str], upsert: UpsertConfig) -> DataFrame:
    """The valid rows of `segment_ids`, judged against every row of `df` (the whole table).

    Safe under concurrent upserts: a row superseded now stays superseded, since
    newer versions are only ever added and a key's latest row is never removed.
    """
    judged = with_validity(df, upsert)
    return judged.where(F.col(SEGMENT_COLUMN).isin(segment_ids) & F.col("valid")).drop("valid")

"""An order-independent fingerprint of a table's rows: what conservation checks compare."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.delta.paths import SEGMENT_COLUMN


def rows_checksum(df: DataFrame, exclude: tuple[str, ...] = (SEGMENT_COLUMN,)) -> tuple[int, int]:
    """(row count, sum of each row's xxhash64 over its columns except `exclude`).

    Equal before and after a merge when the rows are the same multiset, whatever
    their order, files or segment ids.
    """
    columns = sorted(c for c in df.columns if c not in exclude)
    row = (
        df.select(F.xxhash64(*columns).alias("h"))
        .agg(F.count("*").alias("n"), F.sum(F.col("h").cast("decimal(38,0)")).alias("s"))
        .first()
    )
    assert row is not None
    return int(row["n"]), int(row["s"] or 0)

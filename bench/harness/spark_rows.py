"""Rows the Spark benchmarks write as segments (hourly, as many files a segment as a parallel load
leaves), and a session that logs errors only."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


PAYLOAD_MAX = 128  # hex characters of one SHA-512


def segment_rows(
    spark: SparkSession,
    segments: int,
    rows: int,
    files_per_segment: int,
    start: datetime,
    prefix: str = "seg",
    payload: int = 0,
) -> DataFrame:
    """`segments` hourly segments of `rows` rows each, segment i covering hour i after `start`.

    `spark.range` splits ids evenly over its partitions, so with `rows` divisible by
    `files_per_segment` no task mixes two segments and every write task leaves one
    file of one segment (`files_per_segment` small files per segment, as a parallel
    load leaves them). Values are hashed so the files do not compress to nothing.
    Columns: segment_id (`<prefix>-%05d`), event_time, customer_id (0..99999),
    amount (decimal(10,2)), order_ref (bigint), and with `payload` > 0 a `note` of
    that many hex characters (at most 128), which neither compresses nor
    dictionary-encodes: a wide row reaches a gigabyte with a fifth of the rows.
    """
    from pyspark.sql import functions as F

    if not 0 <= payload <= PAYLOAD_MAX:
        raise ValueError(f"payload {payload}: must be 0 to {PAYLOAD_MAX} characters")

    ids = spark.range(0, segments * rows, 1, numPartitions=segments * files_per_segment)
    seg = F.floor(F.col("id") / rows)
    offset = F.col("id") - seg * rows
    first = int(start.timestamp())
    note = [F.substring(F.sha2(F.col("id").cast("string"), 512), 1, payload).alias("note")] if payload else []
    return ids.select(
        F.format_string(f"{prefix}-%05d", seg).alias("segment_id"),
        F.timestamp_seconds(F.lit(first) + seg * 3600 + F.floor(offset * 3600 / rows)).alias("event_time"),
        F.pmod(F.xxhash64("id"), F.lit(100_000)).cast("int").alias("customer_id"),
        (F.pmod(F.xxhash64("id", F.lit(1)), F.lit(10_000_000)) / 100).cast("decimal(10,2)").alias("amount"),
        F.xxhash64("id", F.lit(2)).alias("order_ref"),
        *note,
    )


def spark_quiet(spark: SparkSession) -> None:
    """Errors only from the JVM side."""
    spark.sparkContext.setLogLevel("ERROR")

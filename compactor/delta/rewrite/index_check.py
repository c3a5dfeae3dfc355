"""The index check of segment refresh: what a segment's files and rows actually hold."""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType

from compactor.config.layout import LayoutConfig
from compactor.delta.files import HadoopFiles
from compactor.delta.log.snapshot import physical_names
from compactor.delta.paths import SEGMENT_COLUMN, data_file_uri, table_uri
from compactor.domain.layout import HIDDEN_COLUMNS, IndexFacts
from compactor.domain.segments import Segment

_CODECS = {"SNAPPY": "snappy", "ZSTD": "zstd", "GZIP": "gzip", "UNCOMPRESSED": "uncompressed"}


def partition_id(column: Column, layout: LayoutConfig) -> Column:
    """The value partition of each row: function(column) mod num_partitions."""
    assert layout.partitioning is not None
    n = layout.partitioning.num_partitions
    value = F.hash(column) if layout.partitioning.function == "murmur" else column.cast("long")
    return F.pmod(value, F.lit(n))


def index_facts(
    spark: SparkSession,
    warehouse: Path | str,
    table: str,
    segment: Segment,
    layout: LayoutConfig,
    sub_column: str | None = None,
) -> IndexFacts:
    """The costly index check: inspect one segment's files and rows (and, for a sub-partitioned
    table, which values of `sub_column` they hold)."""
    path = table_uri(warehouse, table)
    rows = DeltaTable.forPath(spark, path).toDF().where(F.col(SEGMENT_COLUMN) == segment.id)
    files = sorted(rows.inputFiles())
    if not files:
        return IndexFacts({}, 0, 0, True, layout.encoding, layout.compression)
    physical = spark.read.parquet(files[0]).schema
    logical = physical_names(spark, path)  # column mapping: col-<uuid> -> name
    columns = {
        logical.get(f.name, f.name): _spark_type(f.dataType)
        for f in physical.fields
        if logical.get(f.name, f.name) not in HIDDEN_COLUMNS
    }
    buckets, partitions = _spread(rows, columns, layout)
    in_order = not (layout.sorted_column and layout.sorted_column in columns) or all(
        _sorted_file(spark, file, layout.sorted_column) for file in files
    )
    encoding, compression = footer(spark, files[0])
    values = sub_partition_values(rows, sub_column) if sub_column and sub_column in columns else None
    return IndexFacts(columns, buckets, partitions, in_order, encoding, compression, values)


def sub_partition_values(rows: DataFrame, column: str) -> frozenset[str]:
    """The distinct values of the sub-partition column, as the text the config declares them in."""
    return frozenset(str(r[0]) for r in rows.select(F.col(column).cast("string")).distinct().collect())


def _spread(rows: DataFrame, columns: dict[str, tuple[str, bool]], layout: LayoutConfig) -> tuple[int, int]:
    """How many time buckets and value partitions the rows span."""
    period = int(layout.bucket_time_period.total_seconds())
    stats = []
    if layout.time_column in columns:
        seconds = F.unix_seconds(F.col(layout.time_column).cast("timestamp"))
        stats.append(F.countDistinct(F.floor(seconds / period)).alias("buckets"))
    if layout.partitioning and layout.partitioning.column in columns:
        stats.append(
            F.countDistinct(partition_id(F.col(layout.partitioning.column), layout)).alias("partitions")
        )
    found = rows.agg(*stats).first() if stats else None
    buckets = int(found["buckets"]) if found is not None and "buckets" in found else 1
    partitions = int(found["partitions"]) if found is not None and "partitions" in found else 0
    return buckets, partitions


def _sorted_file(spark: SparkSession, file: str, column: str) -> bool:
    df = spark.read.parquet(file).select(column).withColumn("__i", F.monotonically_increasing_id())
    df = df.withColumn("__prev", F.lag(column).over(Window.orderBy("__i")))
    return not df.where(F.col("__prev") > F.col(column)).limit(1).count()


def _spark_type(data_type: DataType) -> tuple[str, bool]:
    if isinstance(data_type, ArrayType):
        return data_type.elementType.simpleString(), True
    return data_type.simpleString(), False


def footer(
    spark: SparkSession, file: str, table: str | None = None, size: int | None = None
) -> tuple[str, str]:
    """(encoding, compression) of a Parquet file, from its footer alone (one ranged read). With
    `table`, `file` is an `add` action's path (a URI, relative to the table unless absolute, as
    Delta resolves it); `size`: the file's length, when the caller knows it (else one lookup)."""
    files = HadoopFiles(spark)
    uri = data_file_uri(table, file) if table is not None else file
    metadata = files.parquet_footer(uri, size if size is not None else files.size(uri))
    if metadata.num_row_groups == 0:
        return "dictionary", "snappy"
    group = metadata.row_group(0)
    # the writer's dictionary setting shows in any column: one of all-distinct values (an INT64
    # timestamp) falls back to plain even when dictionaries are on
    encodings = {e for i in range(group.num_columns) for e in group.column(i).encodings}
    encoding = "dictionary" if encodings & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"} else "plain"
    codec = str(group.column(0).compression)
    return encoding, _CODECS.get(codec, codec.lower())

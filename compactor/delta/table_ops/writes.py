"""Loads: a new segment appended, or one sub-partition slice of a segment replaced.

Each is one Delta commit that records the segment in its metadata; records and
bytes are read back from the commit's metrics, so events carry what Delta holds.
A load that creates its table gives it the loaders' transaction retention
(`properties.new_table_properties`), so that the ids of idempotent loads do not
pile up in its log.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
from pyspark.sql import functions as F

from compactor.delta.files import HadoopFiles
from compactor.delta.log import reads
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.log.reader import DeltaLogReader
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.table_ops.properties import new_table_properties
from compactor.domain.segments import Segment
from compactor.errors import CompactorError


def write_segment(
    spark: SparkSession,
    warehouse: Path | str,
    segment: Segment,
    rows: DataFrame,
    txn: tuple[str, int] | None = None,
) -> Segment:
    """Append `rows` as `segment` (one Delta commit) and return it as the commit recorded it,
    with exact counts. `txn` (application id, version): Delta writes nothing when that version
    of the application already committed, which makes a replayed write a no-op; the segment
    returned is then the first commit's."""
    path = table_uri(warehouse, segment.table)
    data = rows.withColumn(SEGMENT_COLUMN, F.lit(segment.id))
    writer = (
        data.write.format("delta").mode("append").option("userMetadata", commit_metadata("load", [segment]))
    )
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
    if not reads.table_exists(spark, warehouse, segment.table):
        writer = _creating(spark, writer)
    writer.save(path)
    facts = DeltaLogReader(HadoopFiles(spark), path, segment.table).written(f'"id":"{segment.id}"')
    recorded = next((s for s in facts.added if s.id == segment.id), None)
    return recorded or replace(segment, records=facts.records, bytes=facts.bytes)


def write_sub_partition(
    spark: SparkSession,
    warehouse: Path | str,
    segment: Segment,
    rows: DataFrame,
    column: str,
    literal: str,
) -> None:
    """Replace one sub-partition slice of `segment` with `rows` in ONE Delta commit.

    Adds the slice when it is empty, refreshes it otherwise: readers see the old
    rows until the commit, then the new ones. Delta checks that every written row
    belongs to the slice, and a merge of the segment committing meanwhile makes
    this write fail with a conflict instead of writing into a merged-away segment.
    """
    path = table_uri(warehouse, segment.table)
    data = rows.withColumn(SEGMENT_COLUMN, F.lit(segment.id))
    predicate = f"{SEGMENT_COLUMN} = '{segment.id}' AND `{column}` = {literal}"
    writer = data.write.format("delta").option("userMetadata", commit_metadata("sub_partition", [segment]))
    if reads.table_exists(spark, warehouse, segment.table):  # never Delta's cached answer
        writer.mode("overwrite").option("replaceWhere", predicate).save(path)
        return
    mismatched = data.where(~F.expr(predicate)).limit(1).count()
    if mismatched:
        raise CompactorError(f"rows for segment {segment.id} hold other values than {column} = {literal}")
    _creating(spark, writer.mode("append")).save(path)


def _creating(spark: SparkSession, writer: DataFrameWriter) -> DataFrameWriter:
    """A write that creates its table: partitioned by segment, with the loaders' properties
    (Delta applies them to a new table only: a writer that lost the race to create it appends)."""
    return writer.partitionBy(SEGMENT_COLUMN).options(**new_table_properties(spark))

"""Deleting a sub-partition value (Kylin's multi-level partitions): its rows leave every segment
in one Delta commit.

The commit's metadata records the segments as they are after it (the value gone,
exact row counts) and the ids of segments left with no sub-partition at all, so
the catalog folds it like any of our commits, at start-up too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from compactor.catalog.changes import CommitRecord
from compactor.config.sub_partitions import SubPartitionConfig
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.log.reads import latest_version, segment_sizes
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.predicates import sub_partition_literal
from compactor.domain.segments import Segment

OP = "sub_partition_delete"


def delete_sub_partition(
    spark: SparkSession,
    warehouse: Path | str,
    table: str,
    config: SubPartitionConfig,
    value: str,
    segments: Sequence[Segment],
) -> CommitRecord:
    """Remove every row whose sub-partition column equals `value`, from all `segments`, at once.

    Readers see the rows until the commit, then none. Returns the commit as the
    catalog folds it, with the changed segments' true sizes read back from Delta.
    """
    path = table_uri(warehouse, table)
    predicate = f"`{config.column}` = {sub_partition_literal(config, value)}"
    rows = spark.read.format("delta").load(path)
    deleted = {
        r[SEGMENT_COLUMN]: int(r["count"])
        for r in rows.where(predicate).groupBy(SEGMENT_COLUMN).count().collect()
    }
    holders = [s for s in segments if value in s.sub_partitions or s.id in deleted]
    emptied = tuple(s.id for s in holders if s.sub_partitions <= {value})
    kept = [
        replace(
            s,
            sub_partitions=s.sub_partitions - {value},
            sub_partition_states=tuple(x for x in s.sub_partition_states if x[0] != value),
            records=s.records - deleted.get(s.id, 0),
            # the rewritten files' sizes are known only after the commit: an estimate here
            bytes=s.bytes * (s.records - deleted.get(s.id, 0)) // max(s.records, 1),
        )
        for s in holders
        if s.id not in emptied
    ]
    metadata = commit_metadata(OP, kept, emptied)
    # an empty overwrite limited to the value: one commit removing its rows and nothing else
    rows.limit(0).write.format("delta").mode("overwrite").option("replaceWhere", predicate).option(
        "userMetadata", metadata
    ).save(path)
    sizes = segment_sizes(spark, warehouse, table)
    exact = tuple(replace(s, bytes=sizes.get(s.id, (0, s.bytes))[1]) for s in kept)
    return CommitRecord(table, latest_version(spark, warehouse, table), exact, emptied, op=OP)

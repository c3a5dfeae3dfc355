"""Purging deleted rows: a segment's files rewritten without the rows deletion vectors hide.

Other writers' DELETE and UPDATE (an erasure request, a correction) mark rows
deleted in deletion vectors; every scan still reads the files and drops them.
Delta's `REORG TABLE ... APPLY (PURGE)` rewrites exactly the files that carry a
vector, in one commit with `dataChange=false` (streaming readers skip it), and
Delta checks it against concurrent writers like any commit: a DELETE or a merge
that touched the same files makes one of the two fail. The files are rewritten
as they are, not re-sorted: a purge keeps each file's rows in their order.
REORG is OPTIMIZE's rewrite: on a table with row tracking the rows kept keep their row
ids and commit versions, and identity values are copied as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.paths import SEGMENT_COLUMN, delta_table_sql, table_uri
from compactor.delta.predicates import in_list
from compactor.domain.segments import Segment

OP = "purge"
# Delta takes a SQL command's userMetadata from the session's configuration
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def purge_deleted_rows(spark: SparkSession, warehouse: Path | str, segments: Sequence[Segment]) -> None:
    """Rewrite the files of one table's segments that carry deletion vectors, without the rows
    they hide, in one commit.

    The commit's metadata records the segments with their hidden rows gone, so the catalog folds
    it like our other commits. Segments with no vector left commit nothing.
    """
    tables = {s.table for s in segments}
    if len(tables) != 1:
        raise ValueError(f"a purge rewrites one table's segments, got tables {sorted(tables)}")
    purged = [replace(s, deleted=0) for s in segments]
    # a session of its own: the metadata must go with this command only, not with the merges
    # other threads commit through the job's session at the same time
    session = spark.newSession()
    session.conf.set(USER_METADATA, commit_metadata(OP, purged, data_change=False))
    uri = table_uri(warehouse, tables.pop())
    ids = in_list(s.id for s in segments)
    session.sql(f"REORG TABLE {delta_table_sql(uri)} WHERE `{SEGMENT_COLUMN}` IN ({ids}) APPLY (PURGE)")

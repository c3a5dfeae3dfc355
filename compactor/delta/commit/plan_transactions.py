"""Per-plan transaction ids left by earlier versions of the job, and their expiry.

Before direct commits, every merge carried a Delta `SetTransaction` with an application id of its
own (`compactor-plan-<plan id>`). Delta keeps each one forever unless the table sets
`delta.setTransactionRetentionDuration`: they ride along in every snapshot and checkpoint, and
past 100 of them the checksum stops carrying them. The job no longer writes any; on a table that
still carries them it sets the retention once, and Delta drops those older than it the next time
it writes a checkpoint.
"""

from __future__ import annotations

import logging
import threading

from pyspark.sql import SparkSession

from compactor.delta.commit.conflicts import conflicts_as_commit_conflict
from compactor.delta.log.snapshot import table_property
from compactor.delta.paths import delta_table_sql, sql_string
from compactor.errors import CommitConflict

log = logging.getLogger(__name__)

RETENTION_PROPERTY = "delta.setTransactionRetentionDuration"
# Delta's own default log retention: a replay older than the log is not recognised either
RETENTION = "interval 30 days"


class PlanTransactionExpiry:
    """Sets the retention on each table found carrying per-plan ids, once per table and job."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._settled: set[str] = set()
        self._lock = threading.Lock()

    def settle(self, table: str, path: str, legacy_ids: int) -> bool:
        """Set the retention on `path` when it carries `legacy_ids` per-plan ids and has none;
        True when this call set it. A lost race with another writer is left for the next merge."""
        with self._lock:
            if table in self._settled:
                return False
            if legacy_ids == 0 or table_property(self.spark, path, RETENTION_PROPERTY) is not None:
                self._settled.add(table)
                return False
        try:
            with conflicts_as_commit_conflict():
                self.spark.sql(
                    f"ALTER TABLE {delta_table_sql(path)} "
                    f"SET TBLPROPERTIES ({sql_string(RETENTION_PROPERTY)} = {sql_string(RETENTION)})"
                )
        except CommitConflict as exc:
            log.info(
                "table %s: setting %s lost a race (%s); tried again later", table, RETENTION_PROPERTY, exc
            )
            return False
        with self._lock:
            self._settled.add(table)
        log.info(
            "table %s carries %d per-plan transaction id(s) from before direct commits: %s set to %s, "
            "so Delta drops them at a checkpoint once they are older",
            table,
            legacy_ids,
            RETENTION_PROPERTY,
            RETENTION,
        )
        return True

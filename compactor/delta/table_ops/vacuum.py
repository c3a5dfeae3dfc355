"""Delete the files of replaced segments once they are older than the table's retention (VACUUM).

A merge removes its inputs' files from the table's state but leaves them on
storage, so readers of older versions (time travel, a streaming reader behind)
keep working. Delta's VACUUM deletes the files no version inside the retention
needs. Delta refuses a retention under its safety check (7 days by default);
the table's config must say `allow_short_retention` for that, and only then is
the check lifted, for this one command.
"""

from __future__ import annotations

import math

from pyspark.sql import SparkSession

from compactor.config.vacuum import VacuumConfig
from compactor.delta.paths import delta_table_sql
from compactor.delta.store import VacuumReport

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


def vacuum(spark: SparkSession, uri: str, table: str, config: VacuumConfig, dry_run: bool) -> VacuumReport:
    hours = math.ceil(config.retain_hours)
    statement = f"VACUUM {delta_table_sql(uri)} RETAIN {hours} HOURS" + (" DRY RUN" if dry_run else "")
    previous = spark.conf.get(RETENTION_CHECK, "true")
    if config.allow_short_retention:
        spark.conf.set(RETENTION_CHECK, "false")
    try:
        rows = spark.sql(statement).collect()
    finally:
        spark.conf.set(RETENTION_CHECK, previous or "true")
    files = tuple(sorted(str(r[0]) for r in rows)) if dry_run else ()
    return VacuumReport(table, dry_run, files)

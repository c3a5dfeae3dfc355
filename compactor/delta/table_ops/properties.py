"""Delta table properties the job and its loaders keep: a table's config, recorded so a restart
keeps what was published, and the retention of the loaders' transaction ids.

This module imports no Spark until a function needs it: the delta-rs loader reads its constants.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from compactor.delta.paths import delta_table_sql, sql_string, table_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from compactor.delta.files import HadoopFiles

CONFIG_PROPERTY = "compactor.config"

TXN_RETENTION_PROPERTY = "delta.setTransactionRetentionDuration"
# How long the transaction ids the loaders leave in a table (one per `ArrowLoader` load, one per
# `StreamingSink` query) outlive their commit: Delta drops older ones whenever it rebuilds the
# table's state, so checkpoints keep only a retention's worth. A table a loader creates gets it;
# a user's own value (or Spark's `TXN_RETENTION_DEFAULT` for new tables) is never overridden. A
# load retried later than this is no longer recognised: it writes its rows again.
LOADER_TXN_RETENTION = "interval 7 days"
TXN_RETENTION_DEFAULT = "spark.databricks.delta.properties.defaults.setTransactionRetentionDuration"


def new_table_properties(spark: SparkSession) -> dict[str, str]:
    """The properties a loader gives a table it creates through Spark (writer options): the
    transaction retention, unless the session sets a default of its own for new tables."""
    if spark.conf.get(TXN_RETENTION_DEFAULT, None):
        return {}
    return {TXN_RETENTION_PROPERTY: LOADER_TXN_RETENTION}


def save_table_config(spark: SparkSession, warehouse: Path | str, table: str, settings_json: str) -> None:
    """Record the table's config in its Delta properties (truth lives in Delta)."""
    target = delta_table_sql(table_uri(warehouse, table))
    spark.sql(
        f"ALTER TABLE {target} SET TBLPROPERTIES ({sql_string(CONFIG_PROPERTY)} = {sql_string(settings_json)})"
    )


def load_table_config(
    spark: SparkSession, warehouse: Path | str, table: str, files: HadoopFiles | None = None
) -> str | None:
    """The config recorded by `save_table_config`, if any (through delta-rs where it can read
    the table: no Spark query for each table start-up has not seen before). `files`: the
    caller's, when it keeps one."""
    from delta.tables import DeltaTable

    from compactor.delta.files import HadoopFiles
    from compactor.delta.log.rust_reads import table_properties

    uri = table_uri(warehouse, table)
    local = (files or HadoopFiles(spark)).local_path(uri)
    found = None if local is None else table_properties(local)
    if found is not None:
        return found.get(CONFIG_PROPERTY)
    properties = DeltaTable.forPath(spark, uri).detail().select("properties").first()
    return properties["properties"].get(CONFIG_PROPERTY) if properties else None

"""A table's config, recorded in its Delta properties so a restart keeps what was published."""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from compactor.delta.files import HadoopFiles
from compactor.delta.paths import table_uri
from compactor.delta.rust_reads import table_properties

CONFIG_PROPERTY = "compactor.config"


def save_table_config(spark: SparkSession, warehouse: Path | str, table: str, settings_json: str) -> None:
    """Record the table's config in its Delta properties (truth lives in Delta)."""
    path = table_uri(warehouse, table).replace("`", "``")
    value = settings_json.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{CONFIG_PROPERTY}' = '{value}')")


def load_table_config(
    spark: SparkSession, warehouse: Path | str, table: str, files: HadoopFiles | None = None
) -> str | None:
    """The config recorded by `save_table_config`, if any (through delta-rs where it can read
    the table: no Spark query for each table start-up has not seen before). `files`: the
    caller's, when it keeps one."""
    uri = table_uri(warehouse, table)
    local = (files or HadoopFiles(spark)).local_path(uri)
    found = None if local is None else table_properties(local)
    if found is not None:
        return found.get(CONFIG_PROPERTY)
    properties = DeltaTable.forPath(spark, uri).detail().select("properties").first()
    return properties["properties"].get(CONFIG_PROPERTY) if properties else None

"""A table's config, recorded in its Delta properties so a restart keeps what was published."""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from compactor.delta.paths import table_uri

CONFIG_PROPERTY = "compactor.config"


def save_table_config(spark: SparkSession, warehouse: Path | str, table: str, settings_json: str) -> None:
    """Record the table's config in its Delta properties (truth lives in Delta)."""
    path = table_uri(warehouse, table).replace("`", "``")
    value = settings_json.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{CONFIG_PROPERTY}' = '{value}')")


def load_table_config(spark: SparkSession, warehouse: Path | str, table: str) -> str | None:
    """The config recorded by `save_table_config`, if any."""
    properties = DeltaTable.forPath(spark, table_uri(warehouse, table)).detail().select("properties").first()
    return properties["properties"].get(CONFIG_PROPERTY) if properties else None

"""What the Delta snapshot itself says: protocol, schema, transactions, table features.

These read the JVM snapshot Delta last loaded for a table (callers open the
table first with `DeltaTable.forPath`), so they cost no extra log replay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from compactor.delta.features import refused_features
from compactor.delta.files import jvm_class, scala_none
from compactor.errors import UnsupportedTableFeature


def _snapshot(spark: SparkSession, path: Path | str) -> Any:
    jvm: Any = spark._jvm
    return (
        jvm_class(jvm, "org.apache.spark.sql.delta.DeltaLog")
        .forTable(spark._jsparkSession, path)
        .unsafeVolatileSnapshot()
    )


def snapshot_files(spark: SparkSession, path: Path | str) -> Any:
    """The snapshot's `add` actions as a JVM DataFrame (path, partitionValues, stats, deletionVector)."""
    return _snapshot(spark, path).allFiles().toDF()


def check_rewritable(spark: SparkSession, path: Path | str) -> None:
    """Refuse a table whose features a rewrite would not preserve (see `features`)."""
    snapshot = _snapshot(spark, path)
    protocol = json.loads(snapshot.protocol().json())["protocol"]
    metadata = json.loads(snapshot.metadata().json())["metaData"]
    refused = refused_features(protocol, metadata)
    if refused:
        raise UnsupportedTableFeature(f"table at {path}: " + "; ".join(refused))


def physical_names(spark: SparkSession, path: Path | str) -> dict[str, str]:
    """Physical -> logical column names under column mapping (empty without it)."""
    schema = json.loads(_snapshot(spark, path).metadata().schemaString())
    return {
        str(f["metadata"]["delta.columnMapping.physicalName"]): str(f["name"])
        for f in schema.get("fields", ())
        if "delta.columnMapping.physicalName" in (f.get("metadata") or {})
    }


def newest_snapshot(spark: SparkSession, path: Path | str) -> tuple[Any, Any]:
    """The table's `DeltaLog` and its newest snapshot: protocol, metadata and log segment only,
    no state rebuild."""
    jvm: Any = spark._jvm
    delta_log = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, str(path)
    )
    return delta_log, delta_log.update(False, scala_none(jvm), scala_none(jvm))


def table_protocol(spark: SparkSession, path: Path | str) -> dict[str, Any]:
    """The table's newest `protocol` action, as the log writes it (no state rebuild)."""
    protocol: dict[str, Any] = json.loads(newest_snapshot(spark, path)[1].protocol().json())
    return dict(protocol["protocol"])


def table_property(spark: SparkSession, path: Path | str, name: str) -> str | None:
    """One of the table's properties in its newest metadata (None: not set), no state rebuild."""
    found = newest_snapshot(spark, path)[1].metadata().configuration().get(name)
    return str(found.get()) if found.isDefined() else None

"""The job's Delta log store on S3: commits by conditional PUT, safe beside other processes.

Delta's default S3 log store checks that a commit file is absent, then writes it; a loader in
another process committing the same version in between is overwritten and its rows are lost
(the years benchmark lost two loads that way). `ConditionalPutLogStore.java` creates each commit
with `If-None-Match: *` through S3A instead. It is one small class, compiled (`java_build`)
against the Delta and Hadoop jars the job runs with.
"""

from __future__ import annotations

from pathlib import Path

from compactor.errors import DependencyResolutionError
from compactor.spark import java_build, jvm

CLASS_NAME = "io.github.streamingcompactor.delta.ConditionalPutLogStore"
SOURCE = Path(__file__).with_name("logstore") / "ConditionalPutLogStore.java"
# Delta picks a log store per URI scheme; both S3 schemes S3A serves get ours unless the user
# configured one (for example S3DynamoDBLogStore, or S3SingleDriverLogStore for a store that
# refuses conditional writes).
SETTINGS = {f"spark.delta.logStore.{scheme}.impl": CLASS_NAME for scheme in ("s3a", "s3")}


def jar() -> Path:
    """The compiled log store, built on first use (seconds) and kept beside the resolved jars."""
    return java_build.compiled_jar(
        [SOURCE],
        _class_path(),
        "compactor-logstore.jar",
        f"set {next(iter(SETTINGS))}=io.delta.storage.S3SingleDriverLogStore if no other process "
        "writes your tables",
    )


def _class_path() -> list[Path]:
    """Delta's storage API (from the resolved Delta jars) and Hadoop's client API (Spark's own)."""
    delta_storage = [p for p in jvm.spark_jars() if p.name.startswith("delta-storage-")]
    hadoop = sorted(jvm.pyspark_jars_dir().glob("hadoop-client-api-*.jar"))
    if not delta_storage or not hadoop:
        raise DependencyResolutionError(
            "cannot compile the S3 log store: delta-storage or hadoop-client-api is missing from the jars "
            "(run `compactor jars`)"
        )
    return [*delta_storage, *hadoop]

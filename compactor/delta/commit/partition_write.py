"""A rewrite's output written as one partition: no per-row partition work in Spark's writer.

Every row a merge writes carries the same partition value (its output segment's id), yet
`writeFiles` hands Spark a partitioned write of the table's partition columns, and Spark's
dynamic-partition writer then projects each row's partition value, compares it with the last,
and copies the whole row into a new `UnsafeRow` before Parquet sees it: about a tenth of a
1 GiB merge's executor time (`bench/README.md`, "The 1 GiB merge, measured fairly").

Here the same file writer Delta's `writeFiles` calls (`DeltaFileFormatWriter`, with Delta's
`DelayedCommitProtocol`, which writes each file at its final name and reports it) writes the rows
unpartitioned into the partition's directory: the committer's sub-directory is the partition
path Spark would have made (`ExternalCatalogUtils.getPartitionPathString`), so each file lands
where the partitioned write would have put it (named as Spark names an unpartitioned write's
files, `-c000` for `.c000`), and its `add` gets the partition values its path holds. The
partition column stays in the files' rows as Delta writes it by default
(`delta.writePartitionColumnsToParquet`), or is dropped where the table says false.
Statistics come from the files' footers (`footer_stats`), Delta's write metrics from Spark's
basic tracker as `writeFiles` registers it, and the Parquet writer gets the options
`writeFiles` would pass (compression, records per file, the table's Parquet version).

What `writeFiles` does besides, this skips; `refusal` keeps the tables where that matters on
`writeFiles`: constraints and generated columns are checked on rows a merge copies unchanged,
and column mapping, random file prefixes, Iceberg compatibility, variant shredding, nested
columns (whose inner NOT NULL Delta relaxes) and the `data/` sub-directory change where or how a
file is written. Rows with a column the table does not have go to `writeFiles`, which refuses
them. The write runs outside a SQL execution, so the session's settings are handed to its tasks as Spark
hands them to a query's (`_sql_conf_propagated`), and a certificate taken by Spark
`Observation`s, which complete when a SQL execution ends, keeps `writeFiles` (`certified_write`'s
choice). An empty output leaves one empty file (Spark's unpartitioned writer opens one), whose
`add` is dropped as `writeFiles` drops it; VACUUM removes the file.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from compactor.delta.features import PLAIN_FILE_FEATURES, features, table_config, table_flag
from compactor.delta.files import jvm_class, scala_items, scala_map, scala_none, scala_seq

DATA_SUBDIR = "spark.databricks.delta.write.dataFilesToSubdir"  # Delta's `data/` sub-directory
# the job's switch for this path, on by default (off: every output goes through `writeFiles`)
WRITE_ONE_PARTITION = "spark.compactor.writeOnePartition"
HISTORY_METRICS = "spark.databricks.delta.history.metricsEnabled"
# the writer options a rewrite gives that `writeFiles` passes on to Spark's writer
_KEPT_OPTIONS = ("maxrecordsperfile", "compression")


def refusal(
    protocol: Mapping[str, Any],
    metadata: Mapping[str, Any],
    partition: Mapping[str, str],
    session_conf: Mapping[str, str],
) -> str | None:
    """Why this output goes through `writeFiles` instead (None: it may be written as one
    partition, pure): `partition` must name a value for each of the table's partition columns;
    `session_conf`: the session's values of `WRITE_ONE_PARTITION` and `DATA_SUBDIR`, if set."""
    if str(session_conf.get(WRITE_ONE_PARTITION, "true")).lower() != "true":
        return f"{WRITE_ONE_PARTITION} is off"
    if str(session_conf.get(DATA_SUBDIR, "false")).lower() == "true":
        return f"{DATA_SUBDIR} is on"
    columns = list(metadata.get("partitionColumns") or ())
    if not columns or sorted(columns) != sorted(partition):
        return f"partition columns {columns}, the output's values name {sorted(partition)}"
    extra = features(protocol) - PLAIN_FILE_FEATURES
    if extra:
        return f"table features {sorted(extra)}"
    nested = [
        f["name"] for f in json.loads(metadata["schemaString"])["fields"] if not isinstance(f["type"], str)
    ]
    if nested:  # Delta relaxes NOT NULL inside them too, which this write does not do
        return f"nested column(s) {nested}"
    config = table_config(metadata)
    if config.get("delta.columnmapping.mode", "none").lower() != "none":
        return "column mapping"
    if table_flag(config, "delta.randomizefileprefixes"):
        return "randomized file prefixes"
    return None


def session_conf(spark: SparkSession) -> dict[str, str]:
    """The session settings `refusal` reads, as set."""
    return {
        key: str(spark.conf.get(key))
        for key in (WRITE_ONE_PARTITION, DATA_SUBDIR)
        if spark.conf.get(key, None)
    }


def write_one_partition(
    spark: SparkSession,
    txn: Any,
    data: DataFrame,
    options: Mapping[str, str],
    partition: Mapping[str, str],
    metadata: Mapping[str, Any],
) -> list[dict[str, Any]] | None:
    """Write `data` (every row in `partition`) into the table of `txn` (a Delta
    `OptimisticTransaction`) as `writeFiles` would write it, unpartitioned; the files' `add`
    actions, without statistics (None: nothing written, `data` has a column the table lacks)."""
    jvm: Any = spark._jvm
    session = spark._jsparkSession
    delta_log = txn.deltaLog()
    j_metadata = txn.metadata()
    columns = list(metadata["partitionColumns"])
    in_files = table_flag(table_config(metadata), "delta.writepartitioncolumnstoparquet", default=True)
    frame = data if in_files else data.drop(*columns)
    expected = {f["name"] for f in json.loads(metadata["schemaString"])["fields"]} - (
        set() if in_files else set(columns)
    )
    tracking = {
        v for k, v in table_config(metadata).items() if k.startswith("delta.rowtracking.materialized")
    }
    if set(frame.columns) - expected - tracking:
        return None  # a column the table does not have: `writeFiles` refuses it, and says why
    execution = frame._jdf.queryExecution()
    output = [a.withNullability(True) for a in scala_items(jvm, execution.analyzed().output())]

    catalog = jvm_class(jvm, "org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils")
    subdir = "/".join(catalog.getPartitionPathString(c, partition[c]) for c in columns)
    option = jvm_class(jvm, "scala.Option")
    root = delta_log.dataPath().toString()
    committer = jvm_class(jvm, "org.apache.spark.sql.delta.files.DelayedCommitProtocol")(
        "delta", root, scala_none(jvm), option.apply(subdir)
    )
    spec = jvm_class(jvm, "org.apache.spark.sql.execution.datasources.FileFormatWriter$OutputSpec")(
        root, scala_map(jvm, {}), scala_seq(jvm, output)
    )
    hadoop_conf = session.sessionState().newHadoopConfWithOptions(
        j_metadata.configuration().concat(delta_log.options())
    )
    trackers = []
    if str(spark.conf.get(HISTORY_METRICS, "true")).lower() == "true":
        basic = jvm_class(jvm, "org.apache.spark.sql.execution.datasources.BasicWriteJobStatsTracker")
        serializable = jvm_class(jvm, "org.apache.spark.util.SerializableConfiguration")
        tracker = basic(serializable(delta_log.newDeltaHadoopConf()), basic.metrics())
        txn.registerSQLMetrics(session, tracker.driverSideMetrics())
        trackers.append(tracker)
    kept = {k: v for k, v in options.items() if k.lower() in _KEPT_OPTIONS}
    versions = jvm_class(jvm, "org.apache.spark.sql.delta.util.TableParquetVersionOption").getWriterOptions(
        session, scala_map(jvm, kept), j_metadata.configuration()
    )
    writer_options = {**kept, **_python_map(jvm, versions)}
    writer = getattr(jvm_class(jvm, "org.apache.spark.sql.delta.files.DeltaFileFormatWriter$"), "MODULE$")
    with _sql_conf_propagated(spark):
        writer.write(
            session,
            execution.executedPlan(),
            delta_log.fileFormat(txn.protocol(), j_metadata),
            committer,
            spec,
            hadoop_conf,
            scala_seq(jvm, []),  # no partition columns: the committer's sub-directory is the partition
            scala_none(jvm),
            scala_seq(jvm, trackers),
            scala_map(jvm, writer_options),
            0,
        )
    adds = [json.loads(add.json())["add"] for add in scala_items(jvm, committer.addedStatuses())]
    for add in adds:
        add["partitionValues"] = {c: partition[c] for c in columns}
    return adds


@contextlib.contextmanager
def _sql_conf_propagated(spark: SparkSession) -> Iterator[None]:
    """The session's `spark.*` settings as the job's local properties while it runs, where the
    tasks read their SQL settings from, as Spark's `SQLExecution.withSQLConfPropagated` sets them
    around a query's execution (`writeFiles` runs inside one; this write has no SQL execution)."""
    context = spark.sparkContext
    confs = _python_map(spark._jvm, spark._jsparkSession.sessionState().conf().getAllConfs())
    previous: dict[str, str | None] = {}
    for key, value in confs.items():
        if key.startswith("spark"):
            previous[key] = context.getLocalProperty(key)
            context.setLocalProperty(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            context.setLocalProperty(key, old)  # type: ignore[arg-type]  # None unsets it


def _python_map(jvm: Any, scala: Any) -> dict[str, str]:
    view = jvm_class(jvm, "scala.jdk.javaapi.CollectionConverters").asJava(scala)
    return {str(k): str(view.get(k)) for k in view.keySet().toArray()}

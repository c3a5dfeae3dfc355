"""Build the SparkSession the compactor runs in: Delta Lake and the Kafka connector."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from compactor import jvm


def on_s3(location: str | Path) -> bool:
    return str(location).startswith(("s3a://", "s3://"))


def jars_for(locations: Sequence[str | Path]) -> list[Path]:
    """Delta and the Kafka connector always; S3A and its AWS SDK only for S3 locations."""
    return jvm.spark_jars() + (jvm.s3_jars() if any(on_s3(loc) for loc in locations) else [])


_FAIR_POOLS_XML = """<?xml version="1.0"?>
<allocations>
{pools}
</allocations>
"""


def build_spark(
    app_name: str = "streaming-compactor",
    master: str = "local[*]",
    extra_conf: Mapping[str, str] | None = None,
    fair_pools: tuple[str, ...] = (),
    scratch_dir: Path | None = None,
    locations: Sequence[str | Path] = (),
) -> SparkSession:
    """Return a SparkSession with Delta's extension and catalog and the cached jars.

    The jars come from `compactor.jvm` (resolved once from Maven Central), so a
    start with a warm cache downloads nothing; Hadoop's S3A connector is added
    only when one of `locations` (the warehouse, the checkpoint) is on S3.
    `fair_pools` turns on the FAIR scheduler with one pool per name (bin-pack
    pools run in pools of the same name). `extra_conf` (the config file's
    `spark:` block) is applied last, so it can change any setting here.
    """
    jars = ",".join(str(p) for p in jars_for(locations))
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", "4")
        # A partitioned write sorts each task's rows by partition value unless it may keep
        # several files open. Our writes carry one segment_id per task, so that sort only
        # copies every row once more (~20% of a merge's time at a few hundred MB).
        .config("spark.sql.maxConcurrentOutputFileWriters", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Delta rebuilds table state with this many tasks; 50 (its default) is
        # wasted scheduling for segment-sized tables on a few cores.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        # Streaming reads only see merges as ordinary commits; keep Delta's default
        # retention for time travel and let users vacuum explicitly.
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
    )
    if fair_pools:
        pools = "\n".join(
            f'  <pool name="{name}"><schedulingMode>FIFO</schedulingMode>'
            "<weight>1</weight><minShare>0</minShare></pool>"
            for name in fair_pools
        )
        base = scratch_dir or Path(tempfile.mkdtemp(prefix="compactor-spark-"))
        base.mkdir(parents=True, exist_ok=True)
        allocation = base / "fairscheduler.xml"
        allocation.write_text(_FAIR_POOLS_XML.format(pools=pools))
        builder = builder.config("spark.scheduler.mode", "FAIR").config(
            "spark.scheduler.allocation.file", str(allocation)
        )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()

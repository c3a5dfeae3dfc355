"""Build the SparkSession the compactor runs in: Delta Lake and the Kafka connector.

The user's Spark settings win. Whatever spark-submit, `PYSPARK_SUBMIT_ARGS` or
`spark-defaults.conf` set is read back from the JVM first; the project's
defaults fill only the keys left unset. Precedence, lowest first: `DEFAULTS`,
Spark's own settings, the config file's `spark:` block, the command line's
`--master`/`--conf`. Jars are added only when this process starts the JVM
itself; under spark-submit they must come with it, and a missing one is named
with the arguments that supply it.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from compactor.config.rules import Resources
from compactor.errors import CompactorError
from compactor.spark import class_archive, conditional_log_store, hash_counter, jvm, local_file_system

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DEFAULT_MASTER = "local[*]"
DELTA_LOG_CACHE_TABLES = 64  # tables whose Delta log the driver keeps open (see DEFAULTS)
JVM_LAUNCH_NOTES = (b"WARNING: Using incubator modules",)
# Where the launch puts our jars, and how that setting separates them, by whether the executors
# are the driver's JVM: in `spark.jars` each executor fetches them from the driver, which a local
# master's executor does too, though the driver has them already (a copy and a `chmod` process
# per jar: about 0.3 s of every start); on the driver's class path it need not.
JAR_SETTINGS = {False: ("spark.jars", ","), True: ("spark.driver.extraClassPath", os.pathsep)}
LOG_CONFIG = Path(__file__).with_name("spark-log4j2.properties")
# Spark's warnings, when we launch the JVM (COMPACTOR_LOG_DIR moves them)
SPARK_LOG_DIR = Path(os.environ.get("COMPACTOR_LOG_DIR") or Path.home() / ".compactor" / "logs")

DEFAULTS: dict[str, str] = {
    "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    "spark.sql.shuffle.partitions": "4",
    # A partitioned write sorts each task's rows by partition value unless it may keep
    # several files open. Our writes carry one segment_id per task, so that sort only
    # copies every row once more (~20% of a merge's time at a few hundred MB).
    "spark.sql.maxConcurrentOutputFileWriters": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Delta rebuilds table state with this many tasks; 50 (its default) is
    # wasted scheduling for segment-sized tables on a few cores.
    "spark.databricks.delta.snapshotPartitions": "2",
    # Delta keeps each table it opened (its log and the cached state of its snapshot, whose query
    # plans take about 4 MB of driver heap) for up to 10,000 tables: a job serving a thousand
    # tables ran out of a 1 GiB heap while it started. The least recently used leave the cache
    # (their state uncached) and are read again when next needed.
    "spark.databricks.delta.delta.log.cacheSize": str(DELTA_LOG_CACHE_TABLES),
    "spark.sql.session.timeZone": "UTC",
    # Spark's default writes timestamps as INT96, deprecated and unread by some engines; merged
    # files keep what modern writers (delta-rs, Spark's own Delta writes elsewhere) leave.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # VACUUM lists a table's directories with this many tasks; Spark's 10000 made a VACUUM of a
    # small table take a minute on a few cores. Clusters with many cores raise it.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "16",
}

# A class each jar set provides, to tell whether it is on the driver's class path.
REQUIRED_CLASSES: dict[str, str] = {
    DELTA_EXTENSION: jvm.DELTA_SPARK,
    "org.apache.spark.sql.kafka010.KafkaSourceProvider": jvm.SPARK_SQL_KAFKA,
}
S3_REQUIRED_CLASSES: dict[str, str] = {"org.apache.hadoop.fs.s3a.S3AFileSystem": jvm.HADOOP_AWS}
LOG_STORE_JAR_NAME = "compactor-logstore.jar (`compactor jars --s3`)"
GCS_FILE_SYSTEM = "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"
GCS_REQUIRED_CLASSES: dict[str, str] = {GCS_FILE_SYSTEM: jvm.GCS_CONNECTOR}
# For S3 locations, under the user's settings: Hadoop 3.5 reads through the analytics accelerator
# by default, which kept every object's stream statistics after the stream closed: a job reading
# its tables' logs for an hour held 13,000 of them, about half of a 1 GiB heap, and spent a core
# on garbage collection (#51's steady hour). The classic stream frees them on close.
S3_DEFAULTS = {
    "spark.hadoop.fs.s3a.input.stream.type": "classic",
    # Spark's checkpoint files (the stream's offsets and commits) and Delta's checksum files are
    # written through a FileContext by default, and S3A builds a new file system for each one (a
    # new AWS client, its thread pools and connections): about one a second in a long run. The
    # FileSystem-based manager uses the cached one; both write a temporary file and rename it.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
}
# For gs:// locations, under the user's settings: Hadoop 3.5's core-default.xml names its own
# hadoop-gcp classes for the scheme, and a block size ("64m") Google's connector cannot parse.
GCS_DEFAULTS = {
    "spark.hadoop.fs.gs.impl": GCS_FILE_SYSTEM,
    "spark.hadoop.fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
    "spark.hadoop.fs.gs.block.size": str(64 * 1024 * 1024),
}


def on_s3(location: str | Path) -> bool:
    return str(location).startswith(("s3a://", "s3://"))


def on_gcs(location: str | Path) -> bool:
    return str(location).startswith("gs://")


def jars_for(locations: Sequence[str | Path]) -> list[Path]:
    """Delta, the Kafka connector, our row-hash sums and local file system always; S3A and its
    AWS SDK only for S3 locations, Google's connector only for gs:// ones."""
    return (
        jvm.spark_jars()
        + hash_counter.jars()
        + local_file_system.jars()
        + ([*jvm.s3_jars(), conditional_log_store.jar()] if any(on_s3(loc) for loc in locations) else [])
        + (jvm.gcs_jars() if any(on_gcs(loc) for loc in locations) else [])
    )


def s3_settings() -> dict[str, str]:
    """What an S3 warehouse sets unless the user did: the job's log store, the classic stream, the
    checkpoint files written through the cached file system."""
    return {**S3_DEFAULTS, **conditional_log_store.SETTINGS}


def spark_submit_args(locations: Sequence[str | Path] = (), local_jars: bool = False) -> list[str]:
    """The spark-submit arguments that bring the compactor's jars and Delta's session settings.

    `--packages` (resolved by spark-submit, shipped to executors) unless `local_jars`,
    then `--jars` with the cached files (for machines without Maven Central access).
    """
    s3 = any(on_s3(loc) for loc in locations)
    if local_jars:
        jars = ["--jars", ",".join(str(p) for p in jars_for(locations))]
    else:
        artifacts = [*jvm.SPARK_ARTIFACTS, *(jvm.S3_ARTIFACTS if s3 else ())]
        # What Spark ships stays out: a second Hadoop or slf4j beside Spark's own breaks the driver.
        shipped = sorted(
            {*jvm.shipped_by_spark("spark", jvm.SPARK_ARTIFACTS)}
            | ({*jvm.shipped_by_spark("s3", jvm.S3_ARTIFACTS)} if s3 else set())
        )
        jars = [
            "--packages",
            ",".join(a.coordinate for a in artifacts),
            "--exclude-packages",
            ",".join(shipped),
        ]
    # --packages takes neither a classifier (Google's shaded jar) nor a jar of our own
    local = [
        *hash_counter.jars(),
        *local_file_system.jars(),
        *(jvm.gcs_jars() if any(on_gcs(loc) for loc in locations) else []),
        *([conditional_log_store.jar()] if s3 else []),
    ]
    if not local_jars and local:
        jars += ["--jars", ",".join(str(p) for p in local)]
    s3_conf = [a for key, value in s3_settings().items() for a in ("--conf", f"{key}={value}")]
    return [
        *jars,
        "--conf", f"spark.sql.extensions={DELTA_EXTENSION}",
        "--conf", f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}",
        *(s3_conf if s3 else []),
    ]  # fmt: skip


_FAIR_POOLS_XML = """<?xml version="1.0"?>
<allocations>
{pools}
</allocations>
"""


def build_spark(
    app_name: str = "streaming-compactor",
    master: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
    fair_pools: Mapping[str, Resources] | None = None,
    scratch_dir: Path | None = None,
    locations: Sequence[str | Path] = (),
    overrides: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession with Delta's extension and catalog, honouring the user's settings.

    `master` (the CLI's `--master`) and `overrides` (its `--conf`) beat everything;
    `extra_conf` (the config file's `spark:` block) beats Spark's own settings;
    the project's `DEFAULTS` fill the rest. `fair_pools` turns on the FAIR
    scheduler with those pools (weight and minShare) unless the user chose a scheduler mode.
    """
    chosen = master or (overrides or {}).get("spark.master") or (extra_conf or {}).get("spark.master")
    user = user_conf(locations, chosen)
    store = {
        **(GCS_DEFAULTS if any(on_gcs(loc) for loc in locations) else {}),
        **(s3_settings() if any(on_s3(loc) for loc in locations) else {}),
    }
    conf = {**DEFAULTS, **store, **user, **(extra_conf or {}), **(overrides or {})}
    conf["spark.master"] = master or conf.get("spark.master") or DEFAULT_MASTER
    if conf["spark.master"].startswith("local"):  # nothing outside this host needs the driver
        conf.setdefault("spark.driver.bindAddress", "127.0.0.1")
        conf.setdefault("spark.driver.host", "127.0.0.1")
    # spark-submit names an app it launched for pyspark "pyspark-shell"; a name the user chose stays.
    user_name = user.get("spark.app.name")
    conf["spark.app.name"] = user_name if user_name and user_name != "pyspark-shell" else app_name
    conf["spark.sql.extensions"] = _with_delta_extension(conf.get("spark.sql.extensions", ""))
    if fair_pools and "spark.scheduler.mode" not in conf:
        conf["spark.scheduler.mode"] = "FAIR"
        conf["spark.scheduler.allocation.file"] = str(_fair_pools_file(fair_pools, scratch_dir))
    _require_classes(locations, conf)
    conf.update(local_file_system.settings(SparkContext._jvm, conf))
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def user_conf(locations: Sequence[str | Path] = (), master: str | None = None) -> dict[str, str]:
    """The Spark settings the user gave (spark-submit, PYSPARK_SUBMIT_ARGS, spark-defaults.conf).

    They live in the JVM's system properties, so the JVM comes first: when this
    process has none yet (no spark-submit), it is launched here with the
    compactor's jars (for `master`, the CLI's `--master`); settings the user gave
    for the same keys are applied after ours and win.
    """
    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Only what must exist at launch goes in as --conf (which beats spark-defaults.conf):
        # the jars, merged with any the defaults file lists, and no console progress bar,
        # which spark-submit otherwise turns on for pyspark-shell.
        ours = [str(p) for p in jars_for(locations)]
        defaults = _defaults_file()
        launch = SparkConf(loadDefaults=False)
        key, separator = JAR_SETTINGS[_executors_are_the_driver(master, defaults)]
        launch.set(key, separator.join(j for j in [*defaults.get(key, "").split(separator), *ours] if j))
        launch.set("spark.ui.showConsoleProgress", DEFAULTS["spark.ui.showConsoleProgress"])
        java_options = class_archive.java_options(
            ours, _with_our_log_config(defaults.get("spark.driver.extraJavaOptions", ""))
        )
        if java_options:
            launch.set("spark.driver.extraJavaOptions", java_options)
        with _utc_jvm():
            SparkContext._ensure_initialized(gateway=_launch_quietly(launch), conf=launch)
    else:
        SparkContext._ensure_initialized()
    active = SparkContext._active_spark_context
    source = active.getConf() if active is not None else SparkConf()
    return dict(source.getAll())


def _executors_are_the_driver(master: str | None, defaults: Mapping[str, str]) -> bool:
    """Will the JVM launched here run the tasks too (a local master, not one PYSPARK_SUBMIT_ARGS
    may name instead)?"""
    chosen = master or defaults.get("spark.master") or DEFAULT_MASTER
    return chosen.startswith("local") and "PYSPARK_SUBMIT_ARGS" not in os.environ


def _launch_quietly(conf: SparkConf) -> Any:
    """Launch the JVM with its stderr relayed to ours, less the launch notes nobody can act on
    (Spark's launcher always adds an incubator module, and the JVM says so on every start)."""
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    threading.Thread(target=_relay, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True).start()
    return gateway


def _relay(stream: IO[bytes]) -> None:
    for line in iter(stream.readline, b""):
        if not line.startswith(JVM_LAUNCH_NOTES):
            os.write(2, line)  # the descriptor the JVM would have written to


def _with_our_log_config(java_options: str) -> str:
    """The driver's Java options with our log4j2 file, unless the user configured Spark's log
    (in those options or a log4j2.properties of their Spark conf directory)."""
    if "log4j2.configurationFile" in java_options or (_conf_dir() / "log4j2.properties").is_file():
        return java_options
    console = "warn" if logging.getLogger().isEnabledFor(logging.INFO) else "error"  # -v
    ours = (
        f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()} -Dcompactor.console.level={console} "
        f"-Dcompactor.log.dir={SPARK_LOG_DIR}"
    )
    return f"{java_options} {ours}".strip()


def _conf_dir() -> Path:
    return Path(os.environ.get("SPARK_CONF_DIR") or str(jvm.pyspark_jars_dir().parent / "conf"))


def _defaults_file() -> dict[str, str]:
    """spark-defaults.conf as spark-submit finds it (SPARK_CONF_DIR, else SPARK_HOME/conf)."""
    path = _conf_dir() / "spark-defaults.conf"
    if not path.is_file():
        return {}
    entries = (line.strip().split(None, 1) for line in path.read_text().splitlines())
    return {e[0]: e[1].strip() for e in entries if len(e) == 2 and not e[0].startswith("#")}


@contextmanager
def _utc_jvm() -> Iterator[None]:
    """The JVM we launch runs in UTC (its TZ), unless the user's environment names a zone."""
    if "TZ" in os.environ:
        yield
        return
    os.environ["TZ"] = "UTC"
    try:
        yield
    finally:
        del os.environ["TZ"]


def missing_jars(locations: Sequence[str | Path] = (), conf: Mapping[str, str] | None = None) -> list[str]:
    """Maven coordinates (or our jar's name) whose classes the driver cannot load (empty when all
    are there). Our log store is required only where `conf` still names it."""
    ours = conditional_log_store.CLASS_NAME in (conf or conditional_log_store.SETTINGS).values()
    required = {
        **REQUIRED_CLASSES,
        **(S3_REQUIRED_CLASSES if any(on_s3(x) for x in locations) else {}),
        **(GCS_REQUIRED_CLASSES if any(on_gcs(x) for x in locations) else {}),
        **(
            {conditional_log_store.CLASS_NAME: LOG_STORE_JAR_NAME}
            if ours and any(on_s3(x) for x in locations)
            else {}
        ),
    }
    return [
        coordinate for name, coordinate in required.items() if not jvm.driver_loads(SparkContext._jvm, name)
    ]


def _require_classes(locations: Sequence[str | Path], conf: Mapping[str, str]) -> None:
    missing = missing_jars(locations, conf)
    if missing:
        fix = shlex.join(spark_submit_args(locations))
        raise CompactorError(
            f"the Spark driver cannot load {', '.join(missing)}: the JVM was started without them "
            f"(spark-submit adds no jars later); pass them to spark-submit: {fix} "
            f"(`compactor jars --spark-submit-args` prints this line)"
        )


def _with_delta_extension(extensions: str) -> str:
    names = [name.strip() for name in extensions.split(",") if name.strip()]
    return ",".join(names if DELTA_EXTENSION in names else [*names, DELTA_EXTENSION])


def _fair_pools_file(fair_pools: Mapping[str, Resources], scratch_dir: Path | None) -> Path:
    # FAIR inside a pool too: several merges of one pool share its executors instead of the first
    # one's tasks holding them all
    pools = "\n".join(
        f'  <pool name="{name}"><schedulingMode>FAIR</schedulingMode>'
        f"<weight>{r.weight}</weight><minShare>{r.min_share}</minShare></pool>"
        for name, r in fair_pools.items()
    )
    base = scratch_dir or Path(tempfile.mkdtemp(prefix="compactor-spark-"))
    base.mkdir(parents=True, exist_ok=True)
    allocation = base / "fairscheduler.xml"
    allocation.write_text(_FAIR_POOLS_XML.format(pools=pools))
    return allocation

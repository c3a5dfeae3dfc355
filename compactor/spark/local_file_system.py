"""The local file system without a process per file, for a job on a local master.

Without Hadoop's native library (pip's PySpark ships none), Hadoop's local file system runs
`chmod` for each file a `FileContext` creates and `readlink` four times for each rename: Delta's
log store writes every commit and checksum that way, and Spark's checkpoint manager every
offset and commit file of the stream. A 40-table drain started 26 processes a merge (JFR's
`jdk.ProcessStart`), about 2 ms of CPU each. `localfs/SpawnFreeLocalFs.java` answers both calls
in the JVM with the same outcome (`SpawnFreeLocalFileSystem`'s comments say how).

It is the `FileContext` view of `file:` only (`fs.AbstractFileSystem.file.impl`), set when the
master is local (the driver's JVM is the only one, and it was launched with our jar) and the
user set no other; the `FileSystem` view, which executors use, stays Hadoop's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compactor.spark import java_build, jvm

CLASS_NAME = "io.github.streamingcompactor.hadoop.SpawnFreeLocalFs"
SETTING = "spark.hadoop.fs.AbstractFileSystem.file.impl"
SOURCES = sorted(Path(__file__).with_name("localfs").glob("*.java"))
JAR_NAME = "compactor-local-fs.jar"


def jar() -> Path:
    """The compiled classes, built on first use (seconds) and kept beside the resolved jars."""
    return java_build.compiled_jar(
        SOURCES,
        sorted(jvm.pyspark_jars_dir().glob("hadoop-client-*.jar")),
        JAR_NAME,
        "leave it out: the local file system then starts a process for each file it writes",
    )


def jars() -> list[Path]:
    """The classes' jar, or none (said in the log) when it cannot be built here."""
    return java_build.optional(jar, "the local file system will start a process for each file it writes")


def settings(java: Any, conf: Mapping[str, str]) -> dict[str, str]:
    """Ours as the `FileContext` local file system, for a session of settings `conf` (master
    decided): for a local master whose JVM loads it, unless `conf` names another."""
    if SETTING in conf or not conf.get("spark.master", "").startswith("local"):
        return {}
    return {SETTING: CLASS_NAME} if jvm.driver_loads(java, CLASS_NAME) else {}

"""A class-data-sharing archive for the driver JVM: the classes a compactor start loads, mapped
from one file instead of read, parsed and verified from the jars at every start.

Measured on the development VM (2 vCPUs, 2026-11-29): a session and its first Delta-less job took
5.6 + 2.8 s without one and 3.7 + 1.6 s with one, so a restart after a crash gets about 3 s
back. The archive is Java's own (a dynamic archive, JDK 13 and later): `compactor jars
--class-archive` builds it by starting the driver JVM in a child process with
`-XX:ArchiveClassesAtExit`, building a session and running a Delta write and read in a
scratch directory, and the JVM writes the archive as it exits (about 150 MB).

A later driver JVM that this package launches maps it (`-XX:SharedArchiveFile`) when it was built
for the same Java, the same Spark and the same jars: the file's name is a digest of those
(`archive_for`), so nothing else ever maps it. The JVM checks again as it maps it and, finding
any difference, starts without it (`-Xshare:auto`, its messages off): an archive can make a
start faster, never make it fail. It is written by a local driver, whose class path holds our jars;
a driver of a cluster master, given them in `spark.jars`, finds its class path different and
starts without it. A driver spark-submit launched, or whose Java options already
name an archive, is left as the user set it up; `COMPACTOR_CLASS_ARCHIVE=off` maps none.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from compactor.spark import jvm

ARCHIVE_DIR = "class-archives"
BUILD_TIMEOUT_S = 600.0  # a session, a tiny Delta job and the dump at exit: about 20 s here
DUMP_ENV = "COMPACTOR_CLASS_ARCHIVE_DUMP"  # set for `build`'s child: where its JVM writes the archive
SWITCH_ENV = "COMPACTOR_CLASS_ARCHIVE"  # "off": never map one (to compare, or to rule it out)
# How a local driver is given our jars (session.JAR_SETTINGS): part of the archive's name, since the
# JVM maps an archive only on the class path it was written with; archives written when the jars
# went in `spark.jars` are left unused rather than refused at every start
CLASS_PATH_LAYOUT = "our jars on a local driver's class path"


def archive_for(jars: Sequence[str | Path]) -> Path:
    """Where the archive for this Java, this Spark and these jars lives (it may not exist)."""
    java = _java()
    release = java.parent.parent / "release"
    spark_jars = jvm.pyspark_jars_dir()
    digest = hashlib.sha256()
    for part in (
        str(java),
        CLASS_PATH_LAYOUT,
        release.read_text() if release.is_file() else "",
        *sorted(p.name for p in spark_jars.glob("*.jar")),
        *(str(p) for p in jars),
    ):
        digest.update(part.encode() + b"\0")
    return jvm.cache_root() / ARCHIVE_DIR / f"{digest.hexdigest()[:16]}.jsa"


def java_options(jars: Sequence[str | Path], given: str) -> str:
    """The driver's Java options `given`, with the archive for `jars` mapped when there is one and
    the options name no archive of their own (in `build`'s child: the archive to write)."""
    if "SharedArchiveFile" in given or "ArchiveClassesAtExit" in given:
        return given
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"{given} -XX:ArchiveClassesAtExit={dump} -Xlog:cds=off -Xlog:cds+dynamic=off".strip()
    try:
        archive = archive_for(jars)
        usable = archive.is_file() and not any(c.isspace() for c in str(archive))  # unquoted below
    except OSError:  # the cache unreadable: start as without one
        return given
    if os.environ.get(SWITCH_ENV, "").lower() == "off" or not usable:
        return given
    return f"{given} -XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off".strip()


def build(jars: Sequence[str | Path], timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """Build the archive for `jars` (replacing one there), in a child process; its path. Raises
    RuntimeError, with the child's last lines, when the JVM wrote none."""
    archive = archive_for(jars)
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")  # beside it: one rename
    with tempfile.TemporaryDirectory(prefix="compactor-class-archive-") as scratch:
        child = subprocess.run(
            [sys.executable, "-m", "compactor.spark.archive_workload", scratch],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, DUMP_ENV: str(partial)},
            check=False,
        )
    if child.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        last = "\n".join((child.stdout + child.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"the JVM wrote no class archive (exit {child.returncode}): {last}")
    os.replace(partial, archive)  # whole, or not at all: a start never maps a half-written file
    return archive


def _java() -> Path:
    """The java spark-submit runs: $JAVA_HOME's, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else Path(shutil.which("java") or "java")
    return found.resolve()

"""Resolve JVM jars with Maven once and cache them on disk.

Both Spark (Delta Lake, the Kafka source/sink) and the local Kafka broker need
jars that pip does not ship. We resolve them with Maven into a cache folder keyed
by the coordinates, so a second start reuses the folder and downloads nothing.
Maven runs with the user's own settings (`~/.m2/settings.xml`, so a company
mirror is used), or with `COMPACTOR_MAVEN_SETTINGS`; `COMPACTOR_OFFLINE=1`
never touches the network.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactor.errors import DependencyResolutionError

# Delta 4.4.0's jar is built for Spark 4.2 (artifact suffix _4.2_2.13). The
# 4.4.1 jar for Spark 4.2 is not on Maven Central, so the PyPI pin is 4.4.0 too.
DELTA_SPARK = "io.delta:delta-spark_4.2_2.13:4.4.0"
SPARK_SQL_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
KAFKA_BROKER = "org.apache.kafka:kafka_2.13:3.9.1"
# Kafka's POM brings no logging backend; the distribution ships reload4j.
KAFKA_LOG_BACKEND = "org.slf4j:slf4j-reload4j:1.7.36"
# S3A for `s3a://` locations, matching pyspark's Hadoop (3.5.0); its AWS SDK bundle is ~700 MB,
# so it is resolved only when an s3a location is configured, never for local warehouses.
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
# Google's connector for `gs://` (Hadoop 3.5's own hadoop-gcp has no setting for another
# endpoint). Its shaded jar carries every dependency its POM leaves out, so nothing else comes
# with it; 4.0.0 is the newest with a shaded jar on Maven Central, built for Hadoop 3.4 / Java 17.
GCS_CONNECTOR = "com.google.cloud.bigdataoss:gcs-connector:4.0.0:shaded"

MAVEN_SETTINGS_ENV = "COMPACTOR_MAVEN_SETTINGS"
OFFLINE_ENV = "COMPACTOR_OFFLINE"
# Maven's `dependency:list` of a resolved set: group:artifact of every jar, for spark-submit.
MODULES_FILE = "modules.txt"


@dataclass(frozen=True)
class Artifact:
    """A Maven coordinate group:artifact:version[:classifier], with artifacts to leave out."""

    coordinate: str
    exclude: tuple[str, ...] = ()

    def to_pom(self) -> str:
        group, artifact, version, *classifier = self.coordinate.split(":")
        exclusions = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
            for g, a in (e.split(":") for e in self.exclude)
        )
        return (
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version>"
            + "".join(f"<classifier>{c}</classifier>" for c in classifier)
            + f"<exclusions>{exclusions}</exclusions></dependency>"
        )


SPARK_ARTIFACTS: tuple[Artifact, ...] = (Artifact(DELTA_SPARK), Artifact(SPARK_SQL_KAFKA))
KAFKA_BROKER_ARTIFACTS: tuple[Artifact, ...] = (Artifact(KAFKA_BROKER), Artifact(KAFKA_LOG_BACKEND))
S3_ARTIFACTS: tuple[Artifact, ...] = (Artifact(HADOOP_AWS),)
GCS_ARTIFACTS: tuple[Artifact, ...] = (Artifact(GCS_CONNECTOR, exclude=("*:*",)),)


def cache_root() -> Path:
    """Where resolved jars live: $COMPACTOR_CACHE_DIR, else ~/.cache/streaming-compactor."""
    configured = os.environ.get("COMPACTOR_CACHE_DIR")
    root = Path(configured) if configured else Path.home() / ".cache" / "streaming-compactor"
    return root.expanduser().resolve()


def artifact_name(jar: str) -> str:
    """`jackson-core-2.16.2.jar` -> `jackson-core` (the name without its version).

    The version is the first part that starts with a digit and has a dot but no
    underscore, so `spark-sql-kafka-0-10_2.13-4.2.0.jar` keeps its `-0-10_2.13`.
    """
    parts = jar.removesuffix(".jar").split("-")
    for strict in (True, False):
        for i, part in enumerate(parts[1:], start=1):
            if part[:1].isdigit() and (not strict or ("." in part and "_" not in part)):
                return "-".join(parts[:i])
    return "-".join(parts)


def resolve(name: str, artifacts: Sequence[Artifact], skip_present_in: Path | None = None) -> list[Path]:
    """Return the jars of `artifacts` and their runtime dependencies.

    Idempotent: the first call runs Maven into `<cache>/<name>-<hash>/`; later
    calls find the completed folder and return at once. Jars whose artifact is
    already in `skip_present_in` (pyspark's own jars) are dropped so that the
    JVM never sees two versions of one library.
    """
    target = resolved_folder(name, artifacts)
    done_marker = target / ".complete"
    if not (done_marker.exists() and (target / MODULES_FILE).exists()):
        _run_maven(name, artifacts, target)
        done_marker.touch()
    present = _names(skip_present_in.glob("*.jar")) if skip_present_in else set()
    return sorted(p for p in target.glob("*.jar") if artifact_name(p.name) not in present)


def resolved_folder(name: str, artifacts: Sequence[Artifact]) -> Path:
    key = hashlib.sha256(repr([(a.coordinate, a.exclude) for a in artifacts]).encode())
    return cache_root() / "jars" / f"{name}-{key.hexdigest()[:12]}"


def modules(name: str, artifacts: Sequence[Artifact]) -> list[str]:
    """`group:artifact` of every jar in the resolved set (resolving it first if needed)."""
    resolve(name, artifacts)
    listing = resolved_folder(name, artifacts) / MODULES_FILE
    found = (_MODULE_LINE.match(line) for line in listing.read_text().splitlines())
    return sorted({f"{m[1]}:{m[2]}" for m in found if m})


_MODULE_LINE = re.compile(r"^\s*([\w.\-]+):([\w.\-]+):jar:")


def _names(jars: Iterable[Path]) -> set[str]:
    return {artifact_name(j.name) for j in jars}


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes"}


def maven_options() -> list[str]:
    """Maven's flags from the environment: a settings file and offline mode.

    Without `COMPACTOR_MAVEN_SETTINGS`, Maven reads the user's `~/.m2/settings.xml`
    itself, mirrors and proxies included; we never override it.
    """
    options: list[str] = []
    settings = os.environ.get(MAVEN_SETTINGS_ENV)
    if settings:
        path = Path(settings).expanduser()
        if not path.is_file():
            raise DependencyResolutionError(f"{MAVEN_SETTINGS_ENV}={settings}: no such file")
        options += ["-s", str(path)]
    if offline():
        options.append("-o")
    return options


def _run_maven(name: str, artifacts: Sequence[Artifact], target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DependencyResolutionError("Maven (`mvn`) is not on PATH; install Maven 3.8+")
    coordinates = [a.coordinate for a in artifacts]
    deps = "".join(a.to_pom() for a in artifacts)
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.compactor</groupId><artifactId>jar-cache</artifactId><version>1</version>"
        f"<dependencies>{deps}</dependencies></project>"
    )
    mode = "offline, from Maven's local repository" if offline() else "downloading what Maven has not cached"
    _progress(f"resolving {name} jars ({', '.join(coordinates)}) into {target} ({mode})")
    with tempfile.TemporaryDirectory(prefix="compactor-mvn-") as work:
        Path(work, "pom.xml").write_text(pom)
        staging = Path(work, "jars")
        cmd = [
            mvn,
            "-B",
            "--no-transfer-progress",
            *maven_options(),
            "dependency:copy-dependencies",
            "dependency:list",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
            f"-DoutputFile={staging / MODULES_FILE}",
        ]
        returncode, output = _stream_maven(cmd, work)
        if returncode != 0:
            raise DependencyResolutionError(_maven_failure(coordinates, output, target))
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(target))
    _progress(f"resolved {len(list(target.glob('*.jar')))} {name} jars")


def _progress(line: str) -> None:
    print(f"compactor: {line}", file=sys.stderr, flush=True)


def _stream_maven(cmd: list[str], cwd: str) -> tuple[int, list[str]]:
    """Run Maven, echoing each artifact it copies (the first resolution takes minutes)."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    output: list[str] = []
    for line in proc.stdout:
        output.append(line.rstrip())
        if "Copying " in line:
            _progress("  " + line.rsplit("Copying ", 1)[1].split(" to ")[0].strip())
    return proc.wait(), output


def _maven_failure(coordinates: list[str], output: list[str], target: Path) -> str:
    errors = [line.removeprefix("[ERROR] ") for line in output if line.startswith("[ERROR]")]
    detail = "\n".join((errors or output)[:6])
    if offline():
        return (
            f"{OFFLINE_ENV}=1 and the jars for {', '.join(coordinates)} are neither in {target} nor in "
            f"Maven's local repository; resolve them once with network access (`compactor jars`) "
            f"or copy that folder from a machine that has it:\n{detail}"
        )
    return f"Maven could not resolve {', '.join(coordinates)}:\n{detail}"


def pyspark_jars_dir() -> Path:
    """The jars of the Spark this process runs: `$SPARK_HOME/jars`, else pyspark's own.

    Under spark-submit pyspark is imported from `pyspark.zip`, so its `__file__`
    has no jars beside it; SPARK_HOME (which spark-submit sets) does.
    """
    from pyspark.find_spark_home import _find_spark_home  # local import: the broker must not need pyspark

    home = os.environ.get("SPARK_HOME") or _find_spark_home()
    return Path(home) / "jars"


def driver_loads(java: Any, class_name: str) -> bool:
    """Whether the driver's JVM (`java`, a py4j view of it) can load `class_name` with the
    loader that holds the jars it was started with, without initialising the class."""
    loader = java.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        java.java.lang.Class.forName(class_name, False, loader)
    except Exception:  # py4j wraps ClassNotFoundException
        return False
    return True


def shipped_by_spark(name: str, artifacts: Sequence[Artifact]) -> list[str]:
    """`group:artifact` of the set's jars that Spark already ships (to leave out of --packages)."""
    present = _names(pyspark_jars_dir().glob("*.jar"))
    return [module for module in modules(name, artifacts) if module.split(":")[1] in present]


def spark_jars() -> list[Path]:
    """Delta Lake and Spark's Kafka connector, minus what pyspark already ships."""
    return resolve("spark", SPARK_ARTIFACTS, skip_present_in=pyspark_jars_dir())


def s3_jars() -> list[Path]:
    """Hadoop's S3A file system and the AWS SDK it needs, minus what pyspark already ships."""
    return resolve("s3", S3_ARTIFACTS, skip_present_in=pyspark_jars_dir())


def gcs_jars() -> list[Path]:
    """Google's `gs://` connector, one shaded jar."""
    return resolve("gcs", GCS_ARTIFACTS)


def kafka_broker_jars() -> list[Path]:
    """Apache Kafka's broker with a logging backend, for a broker in its own JVM."""
    return resolve("kafka-broker", KAFKA_BROKER_ARTIFACTS)

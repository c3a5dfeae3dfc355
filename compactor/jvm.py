"""Resolve JVM jars from Maven Central once and cache them on disk.

Both Spark (Delta Lake, the Kafka source/sink) and the local Kafka broker need
jars that pip does not ship. We resolve them with Maven into a cache folder keyed
by the coordinates, so a second start reuses the folder and downloads nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compactor.errors import DependencyResolutionError

# Delta 4.4.0's jar is built for Spark 4.2 (artifact suffix _4.2_2.13). The
# 4.4.1 jar for Spark 4.2 is not on Maven Central, so the PyPI pin is 4.4.0 too.
DELTA_SPARK = "io.delta:delta-spark_4.2_2.13:4.4.0"
SPARK_SQL_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
# spark-sql-kafka 4.2.0 depends on spark-token-provider-kafka 4.2.0, which Maven
# Central does not serve; 4.0.0 carries the same classes and API, so we swap it in.
SPARK_TOKEN_PROVIDER = "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.0"
KAFKA_BROKER = "org.apache.kafka:kafka_2.13:3.9.1"
# Kafka's POM brings no logging backend; the distribution ships reload4j.
KAFKA_LOG_BACKEND = "org.slf4j:slf4j-reload4j:1.7.36"

_SETTINGS = """<settings><mirrors><mirror>
<id>central-only</id><mirrorOf>*</mirrorOf><url>https://repo.maven.apache.org/maven2</url>
</mirror></mirrors></settings>
"""


@dataclass(frozen=True)
class Artifact:
    """A Maven coordinate group:artifact:version, with artifacts to leave out."""

    coordinate: str
    exclude: tuple[str, ...] = ()

    def to_pom(self) -> str:
        group, artifact, version = self.coordinate.split(":")
        exclusions = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
            for g, a in (e.split(":") for e in self.exclude)
        )
        return (
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version><exclusions>{exclusions}</exclusions></dependency>"
        )


SPARK_ARTIFACTS: tuple[Artifact, ...] = (
    Artifact(DELTA_SPARK),
    Artifact(
        SPARK_SQL_KAFKA,
        exclude=("org.apache.spark:spark-token-provider-kafka-0-10_2.13",),
    ),
    Artifact(SPARK_TOKEN_PROVIDER, exclude=("org.apache.hadoop:*",)),
)
KAFKA_BROKER_ARTIFACTS: tuple[Artifact, ...] = (Artifact(KAFKA_BROKER), Artifact(KAFKA_LOG_BACKEND))
# S3A for `s3a://` locations, matching pyspark's Hadoop (3.5.0); its AWS SDK bundle is ~700 MB,
# so it is resolved only when an s3a location is configured, never for local warehouses.
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
S3_ARTIFACTS: tuple[Artifact, ...] = (Artifact(HADOOP_AWS),)


def cache_root() -> Path:
    """Where resolved jars live: $COMPACTOR_CACHE_DIR, else ~/.cache/streaming-compactor."""
    configured = os.environ.get("COMPACTOR_CACHE_DIR")
    root = Path(configured) if configured else Path.home() / ".cache" / "streaming-compactor"
    return root.expanduser().resolve()


def _artifact_name(jar: str) -> str:
    """`jackson-core-2.16.2.jar` -> `jackson-core` (the name without its version)."""
    stem = jar.removesuffix(".jar")
    parts = stem.split("-")
    for i, part in enumerate(parts):
        if part[:1].isdigit():
            return "-".join(parts[:i])
    return stem


def resolve(name: str, artifacts: Sequence[Artifact], skip_present_in: Path | None = None) -> list[Path]:
    """Return the jars of `artifacts` and their runtime dependencies.

    Idempotent: the first call runs Maven into `<cache>/<name>-<hash>/`; later
    calls find the completed folder and return at once. Jars whose artifact is
    already in `skip_present_in` (pyspark's own jars) are dropped so that the
    JVM never sees two versions of one library.
    """
    key = hashlib.sha256(repr([(a.coordinate, a.exclude) for a in artifacts]).encode())
    target = cache_root() / "jars" / f"{name}-{key.hexdigest()[:12]}"
    done_marker = target / ".complete"
    if not done_marker.exists():
        _run_maven(artifacts, target)
        done_marker.touch()
    present = _names(skip_present_in.glob("*.jar")) if skip_present_in else set()
    return sorted(p for p in target.glob("*.jar") if _artifact_name(p.name) not in present)


def _names(jars: Iterable[Path]) -> set[str]:
    return {_artifact_name(j.name) for j in jars}


def _run_maven(artifacts: Sequence[Artifact], target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DependencyResolutionError("Maven (`mvn`) is not on PATH; install Maven 3.8+")
    deps = "".join(a.to_pom() for a in artifacts)
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.compactor</groupId><artifactId>jar-cache</artifactId><version>1</version>"
        f"<dependencies>{deps}</dependencies></project>"
    )
    with tempfile.TemporaryDirectory(prefix="compactor-mvn-") as work:
        Path(work, "pom.xml").write_text(pom)
        Path(work, "settings.xml").write_text(_SETTINGS)
        staging = Path(work, "jars")
        cmd = [
            mvn, "-q", "-B", "-s", str(Path(work, "settings.xml")),
            "dependency:copy-dependencies", "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            raise DependencyResolutionError(
                f"Maven could not resolve {[a.coordinate for a in artifacts]}:\n{tail}"
            )
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(target))


def pyspark_jars_dir() -> Path:
    import pyspark  # local import: the broker path must not need pyspark

    return Path(pyspark.__file__).parent / "jars"


def spark_jars() -> list[Path]:
    """Delta Lake and Spark's Kafka connector, minus what pyspark already ships."""
    return resolve("spark", SPARK_ARTIFACTS, skip_present_in=pyspark_jars_dir())


def s3_jars() -> list[Path]:
    """Hadoop's S3A file system and the AWS SDK it needs, minus what pyspark already ships."""
    return resolve("s3", S3_ARTIFACTS, skip_present_in=pyspark_jars_dir())


def kafka_broker_jars() -> list[Path]:
    """Apache Kafka's broker with a logging backend, for a broker in its own JVM."""
    return resolve("kafka-broker", KAFKA_BROKER_ARTIFACTS)

"""The job's Delta log store on S3: commits by conditional PUT, safe beside other processes.

Delta's default S3 log store checks that a commit file is absent, then writes it; a loader in
another process committing the same version in between is overwritten and its rows are lost
(the years benchmark lost two loads that way). `ConditionalPutLogStore.java` creates each commit
with `If-None-Match: *` through S3A instead. It is one small class, compiled here with the JDK's
`javac` against the Delta and Hadoop jars the job runs with, once per source, into the jar cache.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from compactor.errors import DependencyResolutionError
from compactor.spark import jvm

CLASS_NAME = "io.github.streamingcompactor.delta.ConditionalPutLogStore"
SOURCE = Path(__file__).with_name("logstore") / "ConditionalPutLogStore.java"
# Delta picks a log store per URI scheme; both S3 schemes S3A serves get ours unless the user
# configured one (for example S3DynamoDBLogStore, or S3SingleDriverLogStore for a store that
# refuses conditional writes).
SETTINGS = {f"spark.delta.logStore.{scheme}.impl": CLASS_NAME for scheme in ("s3a", "s3")}


def jar() -> Path:
    """The compiled log store, built on first use (seconds) and kept beside the resolved jars."""
    source = SOURCE.read_bytes()
    target = (
        jvm.cache_root()
        / "jars"
        / f"logstore-{hashlib.sha256(source).hexdigest()[:12]}"
        / "compactor-logstore.jar"
    )
    if target.is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise DependencyResolutionError(
            "`javac` is not on PATH: the S3 log store is compiled with a JDK 17+ (a JRE is not enough); "
            f"install one, or set {next(iter(SETTINGS))}=io.delta.storage.S3SingleDriverLogStore "
            "if no other process writes your tables"
        )
    with tempfile.TemporaryDirectory(prefix="compactor-logstore-") as work:
        classes = Path(work, "classes")
        result = subprocess.run(
            [javac, "--release", "17", "-nowarn", "-cp", _class_path(), "-d", str(classes), str(SOURCE)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise DependencyResolutionError(
                f"javac could not compile {SOURCE.name}:\n{result.stderr.strip()}"
            )
        staged = Path(work, target.name)
        with zipfile.ZipFile(staged, "w") as archive:  # a jar is a zip; the class needs no manifest
            for compiled in sorted(classes.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(classes).as_posix())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(target))  # whole or absent: a half-written jar is never found
    return target


def _class_path() -> str:
    """Delta's storage API (from the resolved Delta jars) and Hadoop's client API (Spark's own)."""
    delta_storage = [p for p in jvm.spark_jars() if p.name.startswith("delta-storage-")]
    hadoop = sorted(jvm.pyspark_jars_dir().glob("hadoop-client-api-*.jar"))
    if not delta_storage or not hadoop:
        raise DependencyResolutionError(
            "cannot compile the S3 log store: delta-storage or hadoop-client-api is missing from the jars "
            "(run `compactor jars`)"
        )
    return ":".join(str(p) for p in [*delta_storage, *hadoop])

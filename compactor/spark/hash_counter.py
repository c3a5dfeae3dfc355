"""Row-hash sums taken inside a Spark stage's generated code (`fingerprint/*.java`).

`counted(frame, hashes)` returns the frame behind a filter that keeps every row and adds each
row's hash to an accumulator; the sums are complete once the job that consumes the frame has
returned. Every pass counts: two jobs over the frame, or one plan that reads it twice (a union of
it with itself), count its rows twice, so a rewrite must pass each point once (a layout that
samples its input first takes the inputs' sums in a job of their own).

The class is compiled on first use (`java_build`) and put on the JVM's class path at launch
(`session.jars_for`); where it is not there (no JDK, or a JVM started by someone else without
it), `counted` answers None and the caller takes its sums another way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from compactor.errors import DependencyResolutionError
from compactor.spark import java_build, jvm

log = logging.getLogger(__name__)

CLASS_NAME = "io.github.streamingcompactor.spark.RowHashSum"
SOURCES = sorted(Path(__file__).with_name("fingerprint").glob("*.java"))
JAR_NAME = "compactor-row-hash-sum.jar"

_loaded: dict[str, bool] = {}  # by Spark application id


def jar() -> Path:
    """The compiled class, built on first use (seconds) and kept beside the resolved jars."""
    return java_build.compiled_jar(
        SOURCES,
        _class_path(),
        JAR_NAME,
        "leave it out: content certificates then take their sums with Spark's Observation, slower",
    )


def jars() -> list[Path]:
    """The class's jar, or none (said in the log) when it cannot be built here."""
    return java_build.optional(jar, "content certificates will use Spark's Observation")


def _class_path() -> list[Path]:
    """The jars Spark runs with (its SQL API reaches into Scala's reflection)."""
    found = sorted(jvm.pyspark_jars_dir().glob("*.jar"))
    if not any(p.name.startswith("spark-sql-api_") for p in found):
        raise DependencyResolutionError(
            f"cannot compile the row-hash sums: no spark-sql-api jar in {jvm.pyspark_jars_dir()}"
        )
    return found


class RowHashSum:
    """One point's sums, read once the job that consumed the frame has returned."""

    def __init__(self, accumulator: Any) -> None:
        self._accumulator = accumulator

    def rows(self) -> int:
        return int(self._accumulator.rows())

    def total(self) -> int:
        """The hashes' sum modulo 2^64, as an unsigned integer."""
        return int(self._accumulator.sum()) & 0xFFFF_FFFF_FFFF_FFFF


def counted(frame: DataFrame, hashes: Sequence[Column]) -> tuple[DataFrame, list[RowHashSum]] | None:
    """`frame` with every row's `hashes` (signed 64-bit Spark expressions) summed as the job
    that consumes it runs, one sum per hash; None when the JVM lacks the class."""
    spark = frame.sparkSession
    if not loaded(spark):
        return None
    context = spark.sparkContext
    java: Any = spark._jvm
    sums = []
    for hashed in hashes:
        accumulator = java.io.github.streamingcompactor.spark.RowHashSum()
        context._jsc.sc().register(accumulator)
        frame = frame.filter(Column(accumulator.counting(hashed._jc)))
        sums.append(RowHashSum(accumulator))
    return frame, sums


def loaded(spark: SparkSession) -> bool:
    """Whether the driver's JVM can load the class (asked once per application)."""
    application = spark.sparkContext.applicationId
    if application not in _loaded:
        _loaded[application] = jvm.driver_loads(spark._jvm, CLASS_NAME)
        if not _loaded[application]:
            log.warning(
                "content certificates will use Spark's Observation: the JVM has no %s "
                "(start Spark with the job's jars: `compactor jars --spark-submit-args`)",
                CLASS_NAME,
            )
    return _loaded[application]

"""Row-hash sums taken inside a stage's generated code: the same fingerprint Spark's aggregation
and the driver's Arrow hash give, inside the stage's generated code, and Spark's Observation
where the JVM lacks the class."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from compactor.delta.content.fingerprint import (
    arrow_fingerprint,
    observe,
    observed,
    observed_both,
    row_hash,
    spark_fingerprint,
)
from compactor.errors import DependencyResolutionError
from compactor.spark import hash_counter, java_build

pytestmark = pytest.mark.integration

ROWS = [
    (1, "a", 1.5, None),
    (2, None, -0.0, b"x"),
    (3, "ccc", float("nan"), b""),
    (None, "d", None, None),
    (5, "a", 2.25, b"\x00\xff"),
] * 40


def _frame(spark: Any) -> Any:
    return spark.createDataFrame(ROWS, "k long, s string, d double, y binary").repartition(3)


def test_the_job_s_jvm_has_the_class(spark: Any) -> None:
    assert hash_counter.loaded(spark)


def test_sums_taken_in_the_stage_equal_spark_s_aggregation_and_the_driver_s_hash(
    spark: Any, tmp_path: Path
) -> None:
    frame = _frame(spark)
    columns = frame.columns
    second = row_hash(frame.schema, ["s", "k"])  # any other hash, summed beside the first
    watched, watch = observe(frame, columns, second)
    watched.write.parquet(str(tmp_path / "out"))
    first, also = observed_both(watch)
    assert first == spark_fingerprint(frame, columns)
    assert first.rows == len(ROWS)
    assert also == spark_fingerprint(frame.select("s", "k"), ["s", "k"])
    table = pa.Table.from_pylist(
        [dict(zip(columns, row, strict=True)) for row in ROWS],
        pa.schema([("k", pa.int64()), ("s", pa.string()), ("d", pa.float64()), ("y", pa.binary())]),
    )
    assert first == arrow_fingerprint(table)


def test_the_count_stays_inside_the_generated_code_of_the_write_s_stage(spark: Any) -> None:
    frame = spark.range(0, 1000).selectExpr("id", "cast(id AS string) AS s")
    watched, _ = observe(frame.coalesce(1), frame.columns)
    plan = watched._jdf.queryExecution().executedPlan().toString()
    filters = [line for line in plan.splitlines() if "Filter" in line]
    assert filters and all(line.lstrip(" +-:").startswith("*(") for line in filters), plan


def test_a_frame_read_twice_is_counted_twice_and_a_frame_never_run_counts_nothing(spark: Any) -> None:
    frame = _frame(spark)
    watched, watch = observe(frame, frame.columns)
    assert observed(watch).rows == 0
    watched.collect()
    watched.collect()
    once = spark_fingerprint(frame, frame.columns)
    assert observed(watch) == once + once, "each job that consumes the frame adds its rows"


def test_without_the_class_the_observation_takes_the_same_sums(
    spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(hash_counter._loaded, spark.sparkContext.applicationId, False)
    frame = _frame(spark)
    watched, watch = observe(frame, frame.columns)
    assert "Filter" not in watched._jdf.queryExecution().optimizedPlan().toString()
    watched.write.parquet(str(tmp_path / "out"))
    assert observed(watch) == spark_fingerprint(frame, frame.columns)


def test_without_a_jdk_the_jar_is_left_out_and_the_log_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path))  # nothing compiled there yet
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(
        DependencyResolutionError, match=r"`javac` is not on PATH: RowHashSum.java is compiled"
    ):
        hash_counter.jar()
    with caplog.at_level(logging.WARNING):
        assert hash_counter.jars() == []
    assert "content certificates will use Spark's Observation" in caplog.text


def test_the_jar_is_compiled_once_per_version_of_its_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path))
    built = hash_counter.jar()
    assert built.parent.parent == tmp_path / "jars" and built.name == hash_counter.JAR_NAME
    assert built.parent.name.startswith("row-hash-sum-")
    monkeypatch.setattr(shutil, "which", lambda name: None)  # found in the cache: no javac asked
    assert hash_counter.jar() == built
    source = tmp_path / "Broken.java"
    source.write_text("class Broken { int x = ; }")
    with pytest.raises(DependencyResolutionError, match=r"javac could not compile Broken.java"):
        monkeypatch.undo()
        monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path))
        java_build.compiled_jar([source], [], "compactor-broken.jar", "fix it")

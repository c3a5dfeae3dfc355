"""The S3 connector (and its ~700 MB AWS SDK) is resolved only for S3 locations; a local driver
takes our jars on its class path, a cluster in `spark.jars`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from compactor.spark import conditional_log_store, hash_counter, jvm, local_file_system
from compactor.spark.session import jars_for, on_s3


def test_s3_jars_only_for_s3_locations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm, "spark_jars", lambda: [Path("delta.jar")])
    monkeypatch.setattr(jvm, "s3_jars", lambda: [Path("hadoop-aws.jar")])
    monkeypatch.setattr(conditional_log_store, "jar", lambda: Path("compactor-logstore.jar"))
    monkeypatch.setattr(hash_counter, "jar", lambda: Path("compactor-row-hash-sum.jar"))
    monkeypatch.setattr(local_file_system, "jar", lambda: Path("compactor-local-fs.jar"))
    assert jars_for(["/data/warehouse", "file:///data/cp", "abfss://c@a.dfs.core.windows.net/w"]) == [
        Path("delta.jar"),
        Path("compactor-row-hash-sum.jar"),
        Path("compactor-local-fs.jar"),
    ]
    assert jars_for(["/data/warehouse", "s3a://bucket/checkpoint"]) == [
        Path("delta.jar"),
        Path("compactor-row-hash-sum.jar"),
        Path("compactor-local-fs.jar"),
        Path("hadoop-aws.jar"),
        Path("compactor-logstore.jar"),
    ]
    assert on_s3("s3://bucket/w") and not on_s3(Path("/s3a/local"))


@pytest.mark.parametrize(
    ("master", "defaults", "submit_args", "driver_only"),
    [
        ("local[2]", {}, None, True),
        (None, {}, None, True),  # the default master is local
        (None, {"spark.master": "local[1]"}, None, True),
        (None, {"spark.master": "spark://h:7077"}, None, False),
        ("spark://h:7077", {"spark.master": "local[1]"}, None, False),  # --master beats the file
        ("local[2]", {}, "--master yarn pyspark-shell", False),  # the args may name another master
    ],
)
def test_our_jars_go_on_the_class_path_only_where_the_driver_runs_the_tasks(
    monkeypatch: pytest.MonkeyPatch,
    master: str | None,
    defaults: dict[str, str],
    submit_args: str | None,
    driver_only: bool,
) -> None:
    from compactor.spark.session import JAR_SETTINGS, _executors_are_the_driver

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    if submit_args is not None:
        monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit_args)
    assert _executors_are_the_driver(master, defaults) is driver_only
    assert JAR_SETTINGS[driver_only][0] == ("spark.driver.extraClassPath" if driver_only else "spark.jars")


def test_a_local_session_loads_delta_from_its_class_path_and_fetches_no_jar(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    class_path = conf.get("spark.driver.extraClassPath", "").split(os.pathsep)
    assert any(Path(p).name.startswith("delta-spark_") for p in class_path), class_path
    assert "delta-spark_" not in conf.get("spark.jars", ""), "a local executor would fetch it again"
    java = spark._jvm.java.lang
    delta = java.Class.forName("io.delta.sql.DeltaSparkSessionExtension")
    assert delta.getClassLoader().equals(java.ClassLoader.getSystemClassLoader())

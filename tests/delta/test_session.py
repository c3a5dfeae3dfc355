"""The S3 connector (and its ~700 MB AWS SDK) is resolved only for S3 locations."""

from __future__ import annotations

from pathlib import Path

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

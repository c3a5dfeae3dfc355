"""The driver keeps a bounded number of Delta tables open: each one Delta caches holds its
snapshot's state and query plans (megabytes of heap), and a job serving thousands of tables
ran out of memory while it started before the bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from compactor.spark.session import DELTA_LOG_CACHE_TABLES

pytestmark = pytest.mark.integration


def test_tables_opened_past_the_bound_leave_delta_s_cache(spark: Any, tmp_path: Path) -> None:
    assert spark.conf.get("spark.databricks.delta.delta.log.cacheSize") == str(DELTA_LOG_CACHE_TABLES)
    jvm = spark._jvm
    for i in range(DELTA_LOG_CACHE_TABLES + 8):
        path = str(tmp_path / f"t{i}")
        write_deltalake(path, pa.table({"x": [i]}))  # delta-rs: no Spark job per table
        jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # opened, cached
    cache = getattr(getattr(jvm.org.apache.spark.sql.delta, "DeltaLog$"), "MODULE$").deltaLogCache().get()
    cache.cleanUp()
    assert 0 < cache.size() <= DELTA_LOG_CACHE_TABLES

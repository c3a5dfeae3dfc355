"""Liquid-clustered tables are refused, with why, where an operator first looks: `compactor
config validate --warehouse` and the store's refusal the job checks before a table's first merge
(real Spark and Delta). A segment is a partition; Delta forbids partitioning a clustered table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.delta.spark_store import SparkTableStore
from compactor.observe.metrics.spark_work import SparkWork
from tests.delta.test_direct_commit import rust_load

pytestmark = pytest.mark.integration


def test_a_clustered_table_is_refused_at_validate_and_by_the_store(
    spark: Any, warehouse: Path, tmp_path: Path
) -> None:
    rust_load(warehouse, "s0", 0, table="plain")
    spark.sql(
        f"CREATE TABLE delta.`{warehouse / 'clustered'}` (k BIGINT, v DOUBLE, segment_id STRING) "
        "USING delta CLUSTER BY (k)"
    )
    store = SparkTableStore(spark, str(warehouse))
    assert store.refusal("plain") is None
    why = store.refusal("clustered")
    assert why is not None and why.startswith("clustering (liquid clustering)")

    config = tmp_path / "tables.yaml"
    config.write_text("defaults:\n  rules:\n    - rule: minor\n")
    result = CliRunner().invoke(main, ["config", "validate", str(config), "--warehouse", str(warehouse)])
    assert result.exit_code != 0
    lines = result.output.splitlines()
    assert lines[0].startswith("table clustered: not compacted: clustering (liquid clustering)")
    assert lines[-1].startswith("error: 1 table(s) in ") and "OPTIMIZE" in lines[-1]

    config.write_text(config.read_text() + "tables:\n  clustered:\n    merge_enabled: false\n")
    result = CliRunner().invoke(main, ["config", "validate", str(config), "--warehouse", str(warehouse)])
    assert result.exit_code == 0, result.output


def test_the_check_before_a_first_merge_reads_the_log_and_runs_no_spark_job(
    spark: Any, warehouse: Path
) -> None:
    """Delta's snapshot of a version without a checksum (each delta-rs load leaves one) runs a
    Spark job to find the protocol: paid on each table's first merge after a start, so 10,000
    times beside 10,000 tables. The live files the merge reads anyway hold both actions."""
    for i in range(3):
        rust_load(warehouse, f"s{i}", i, table="plain")
    assert not list((warehouse / "plain" / "_delta_log").glob("*.crc")), "delta-rs writes no checksum"
    store = SparkTableStore(spark, str(warehouse))
    work = SparkWork(spark)
    assert store.refusal("plain") is None
    # a job of our own marks the moment: the driver lists jobs as its listener hears of them
    spark.sparkContext.setJobDescription("marker")
    spark.range(1).count()
    spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
    deadline = time.monotonic() + 30
    while not any(j.description == "marker" for j in work.since()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {j.description for j in work.since()} == {"marker"}  # a count may run two jobs

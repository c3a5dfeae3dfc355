"""A job that starts while a table's first load is being written: Delta has made the table's
`_delta_log/` (and the data files are there) but not its first commit. Start-up must not take
it for a table; once the commit lands, its events make it a table new to the running job."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.spark_store import SparkTableStore
from compactor.job.wiring import build_handler
from tests.helpers.jobs import TABLE, bulk_load
from tests.helpers.streaming import JobRunner, make_kafka

pytestmark = pytest.mark.integration

CONFIG = {"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}}


def test_a_table_whose_first_commit_is_held_back_is_born_while_the_job_runs(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse, staging = tmp_path / "warehouse", tmp_path / "staging"
    bulk_load(spark, warehouse, kafka, 7, 10, 0, "settled")  # a table that is there already
    bulk_load(spark, staging, kafka, 7, 10, 0, TABLE)  # its events are on the topic already
    written, born = Path(table_uri(staging, TABLE)), Path(table_uri(warehouse, TABLE))
    shutil.copytree(written, born, ignore=shutil.ignore_patterns("_delta_log"))
    (born / "_delta_log").mkdir()  # as Delta leaves it before the first commit file exists
    assert SparkTableStore(spark, warehouse).tables() == ["settled"], "not a table yet"

    handler = build_handler(spark, load_config(CONFIG), warehouse, kafka)  # start-up: no error
    assert handler.catalog.table_names == ["settled"]
    shutil.copy(written / "_delta_log" / f"{0:020d}.json", born / "_delta_log")  # the commit lands
    JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()

    for table in ("settled", TABLE):
        (week,) = handler.catalog.segments(table)
        assert (week.records, str(week.range.start.date())) == (70, "2024-01-01"), table
        rows = spark.read.format("delta").load(table_uri(warehouse, table))
        assert rows.count() == 70 and rows.select("segment_id").distinct().count() == 1
    assert handler.stats.dead_letters == 0

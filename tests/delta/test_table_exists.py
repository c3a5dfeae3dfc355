"""A table asked about while it is being born (its `_delta_log/` made, no commit in it yet) is
found once another process writes its first commit, in the same Spark session: the answer is
read from the log's files each time, never from the `DeltaLog` Spark caches per path (issue 49:
Delta's cached "no commit" made every later event of the table `unknown_table`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.client.loader import sample_rows
from compactor.delta.files import HadoopFiles
from compactor.delta.log import reads
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.spark_store import SparkTableStore
from compactor.domain.segments import Segment, TimeRange
from tests.conftest import S3Server

pytestmark = pytest.mark.integration

TABLE = "born"
DAY = datetime(2024, 1, 1, tzinfo=UTC)


def _first_load_elsewhere(spark: Any, staging: str) -> Segment:
    """A load (with its compactor record) committed at `staging`: the commit another process
    writes, which this session's Delta never sees being written."""
    segment = Segment("d00", TABLE, TimeRange(DAY, DAY + timedelta(days=1)), DAY, 10)
    rows = sample_rows(spark, DAY, DAY + timedelta(days=1), 10, seed=0).withColumn(
        SEGMENT_COLUMN, F.lit("d00")
    )
    (
        rows.write.format("delta")
        .mode("append")
        .option("userMetadata", commit_metadata("load", [segment]))
        .partitionBy(SEGMENT_COLUMN)
        .save(staging)
    )
    return segment


def _hadoop(spark: Any, uri: str) -> tuple[Any, Any]:
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


@pytest.fixture(params=["local", "s3"])
def warehouses(
    request: pytest.FixtureRequest, tmp_path: Path, unique: Callable[[str], str]
) -> tuple[str, str]:
    """(the job's warehouse, where the other process wrote the load first)."""
    if request.param == "local":
        return str(tmp_path / "warehouse"), str(tmp_path / "staging")
    s3: S3Server = request.getfixturevalue("s3")
    return s3.location(unique("warehouse")), s3.location(unique("staging"))


def test_a_table_asked_about_while_being_born_is_found_once_its_first_commit_lands(
    spark: Any, warehouses: tuple[str, str]
) -> None:
    warehouse, staging = warehouses
    written, born = table_uri(staging, TABLE), table_uri(warehouse, TABLE)
    segment = _first_load_elsewhere(spark, written)
    fs, _ = _hadoop(spark, written)
    util = spark._jvm.org.apache.hadoop.fs.FileUtil
    for status in fs.listStatus(_hadoop(spark, written)[1]):  # the data files are there first
        name = str(status.getPath().getName())
        if name != "_delta_log":
            util.copy(fs, status.getPath(), fs, _hadoop(spark, f"{born}/{name}")[1], False, fs.getConf())
    fs.mkdirs(_hadoop(spark, f"{born}/_delta_log")[1])  # as Delta makes it before the commit file
    store = SparkTableStore(spark, warehouse)

    assert not store.exists(TABLE), "no commit yet: not a table"
    assert not DeltaTable.isDeltaTable(spark, born)  # and Delta's cache of the path says so too
    files = HadoopFiles(spark)
    commit = f"{0:020d}.json"
    data = files.read_bytes(f"{written}/_delta_log/{commit}")
    assert data is not None
    files.replace_bytes(f"{born}/_delta_log/{commit}", data)  # the first commit lands

    assert store.exists(TABLE), "asked again in the same session: the table is there"
    # what the job reads of a table new to it, right after
    assert [r.added for r in store.history(TABLE)] == [(segment,)]
    assert store.latest_version(TABLE) == 0
    assert store.segments_with_rows(TABLE, ["d00", "d01"]) == {"d00"}
    assert [(n.visible, n.hidden) for n in store.row_counts(TABLE).values()] == [(10, 0)]
    # the loaders' read
    assert [s.id for s in reads.read_catalog(spark, warehouse, TABLE).segments(TABLE)] == ["d00"]


def test_a_table_whose_cleanup_removed_version_0_and_its_checkpoint_hint_is_still_a_table(
    spark: Any, tmp_path: Path
) -> None:
    """Neither file the quick lookup knows: Delta lists the log afresh (a checkpoint is there)."""
    warehouse = tmp_path / "warehouse"
    uri = table_uri(warehouse, TABLE)
    for _ in range(2):
        spark.range(3).write.format("delta").mode("append").save(uri)
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri).checkpoint()
    log = Path(uri) / "_delta_log"
    (log / f"{0:020d}.json").unlink()
    (log / "_last_checkpoint").unlink()
    assert reads.table_exists(spark, warehouse, TABLE)
    assert not reads.table_exists(spark, warehouse, "never")
    (tmp_path / "warehouse" / "empty" / "_delta_log").mkdir(parents=True)
    assert not reads.table_exists(spark, warehouse, "empty")

"""Rows other writers delete are purged from the files, on real Kafka, Spark and Delta.

A DELETE with deletion vectors leaves the rows in the files; the job sees that
commit ("written by others") on a table with no event of its own, and rewrites
a segment whose deleted share reaches `purge_deleted_ratio` without them: one
REORG ... APPLY (PURGE) commit with `dataChange=false`. Readers see the same
rows before and after, a Delta streaming reader goes on as if nothing happened,
and the catalog counts the rows the files hold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.cli.main import main
from compactor.config.loading import load_config
from compactor.delta.log.snapshot import snapshot_files
from compactor.job.wiring import build_handler
from tests.helpers.sales import TABLE, create_table, load_days, read_table
from tests.helpers.streaming import (
    DownstreamReader,
    JobRunner,
    assert_delta_rs_agrees,
    checksum,
    data_change_flags,
    make_kafka,
)

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)
ROWS = 40
CONFIG = {
    # a level threshold of 100 merges nothing here: what changes the files is the purge
    "defaults": {"rules": [{"rule": "minor", "level_thresholds": [100, 0]}]},
    "operations": {"check_other_writers_every": "1s"},
}


def delete_first(spark: Any, path: Path, segment_id: str, day: datetime, rows: int) -> None:
    """Another writer's DELETE of the segment's first `rows` rows (event times are distinct)."""
    before = int((day + timedelta(days=1) * rows / ROWS).timestamp())
    spark.sql(
        f"DELETE FROM delta.`{path}` WHERE segment_id = '{segment_id}' "
        f"AND event_time < timestamp_seconds({before})"
    )


def files_of(spark: Any, path: Path) -> DataFrame:
    files = DataFrame(snapshot_files(spark, str(path)), spark)
    return files.select(F.map_values("partitionValues")[0].alias("sid"), "path", "deletionVector")


def test_a_delete_of_30_percent_is_purged_and_readers_see_the_same_rows(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    path = create_table(spark, warehouse, {"delta.enableDeletionVectors": "true"})
    load_days(spark, warehouse, kafka, JAN, 3, rows=ROWS)
    handler = build_handler(spark, load_config(CONFIG), warehouse, kafka)
    runner = JobRunner(spark, handler, kafka, tmp_path / "checkpoint")
    runner.run_until_quiet()
    reader = DownstreamReader(spark, path, tmp_path / "reader", {"skipChangeCommits": "true"})
    reader.run()

    delete_first(spark, path, "d20240102", JAN + timedelta(days=1), 12)  # 30 %: purged
    delete_first(spark, path, "d20240103", JAN + timedelta(days=2), 4)  # 10 %: under the ratio
    before = checksum(read_table(spark, warehouse))
    assert before[0] == 3 * ROWS - 16
    time.sleep(1.5)  # the next look for other writers' commits is due
    runner.run_once()  # no event: the table is found by looking, and purged between batches

    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert history.operation == "REORG" and '"op":"purge"' in history.userMetadata
    assert data_change_flags(path, history.version) == {False}
    vectors: dict[str, bool] = {}  # segment -> whether any of its files carries a deletion vector
    for file in files_of(spark, path).collect():
        vectors[file.sid] = vectors.get(file.sid, False) or file.deletionVector is not None
    assert vectors == {"d20240101": False, "d20240102": False, "d20240103": True}
    assert checksum(read_table(spark, warehouse)) == before
    catalog = handler.catalog
    counts = {s.id: (s.records, s.deleted) for s in catalog.segments(TABLE)}
    assert counts == {"d20240101": (40, 0), "d20240102": (28, 0), "d20240103": (36, 4)}
    assert handler.stats.purges == 1

    config = tmp_path / "tables.yaml"
    config.write_text(json.dumps(CONFIG))  # YAML is a superset of JSON
    shown = CliRunner().invoke(
        main, ["status", "--config", str(config), "--warehouse", str(warehouse), "--json"]
    )
    assert shown.exit_code == 0, shown.output
    (table,) = json.loads(shown.output)
    assert table["deleted_rows"] == {"rows": 4, "ratio": round(4 / 108, 4), "purge_ratio": 0.2}

    for purged in [r.path for r in files_of(spark, path).collect() if r.sid == "d20240102"]:
        schema = pq.ParquetFile(str(path / purged)).schema_arrow
        assert str(schema.field("event_time").type) == "timestamp[us, tz=UTC]", "never INT96"
    assert_delta_rs_agrees(spark, path)

    load_days(spark, warehouse, kafka, JAN + timedelta(days=3), 1, rows=ROWS)
    reader.run()  # through the DELETE (skipped, as the reader asked) and the purge (no data change)
    seen = reader.seen()
    assert seen.count() == 4 * ROWS, "each loaded row once: the purge's rewritten files are not new rows"
    assert seen.distinct().count() == 4 * ROWS

"""Compaction is invisible to the tables' readers, on real Kafka, Spark and Delta.

Merges that only rearrange rows commit with `dataChange=false`, as Delta's
OPTIMIZE does: a downstream Delta streaming reader keeps running through them
and sees each loaded row once, and the change feed holds nothing for them.
Tables with newer Delta features (deletion vectors, column mapping) merge too,
and delta-rs, an independent Delta implementation, reads what Spark reads.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.codec.events import default_codec
from compactor.delta.paths import table_uri
from tests.helpers.sales import (
    TABLE,
    create_table,
    handler_for,
    load_days,
    merge_versions,
    read_table,
)
from tests.helpers.streaming import (
    DownstreamReader,
    JobRunner,
    assert_delta_rs_agrees,
    checksum,
    consume_all,
    data_change_flags,
    make_kafka,
)

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday


def results(kafka_bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [default_codec().decode_merge_result(m.value()) for m in consume_all(kafka_bootstrap, topic)]


# the rewritten merge's reader is the nightly run's (CI's time): moved files are the harder case
@pytest.mark.parametrize(
    "promote_over", [pytest.param(None, marks=pytest.mark.nightly), 1], ids=["rewritten", "files moved"]
)
def test_a_streaming_reader_survives_week_and_month_merges_and_sees_each_row_once(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    tmp_path: Path,
    promote_over: int | None,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    # files moved: every file counts as well sized, so each merge moves its inputs' files
    handler = handler_for(spark, warehouse, kafka, ["week", "month"], promote_files_over=promote_over)
    job = JobRunner(spark, handler, kafka, tmp_path / "checkpoint")
    path = Path(table_uri(warehouse, TABLE))
    load_days(spark, warehouse, kafka, JAN, 7)
    reader = DownstreamReader(spark, path, tmp_path / "reader")
    reader.run()
    job.run_until_quiet()
    assert len(handler.catalog.segments(TABLE)) == 1, "the week merged"
    reader.run()  # the week's merge commit is skipped, not an error
    for first, days in ((7, 7), (14, 7), (21, 7), (28, 3)):  # a week's loads between runs
        load_days(spark, warehouse, kafka, JAN + timedelta(days=first), days)
        reader.run()
        job.run_until_quiet()
    reader.run()

    (month,) = handler.catalog.segments(TABLE)
    assert (month.start, month.end) == (JAN, datetime(2024, 2, 1, tzinfo=UTC))
    merges = merge_versions(spark, warehouse)
    # four weeks, then the month (largest level first: the last days join it directly)
    assert len(merges) == handler.stats.merges == 5
    assert all(data_change_flags(path, v) == {False} for v in merges)
    assert [r["data_change"] for r in results(kafka_bootstrap, kafka.results_topic)] == [False] * 5
    assert reader.seen().count() == 31 * 20
    assert checksum(reader.seen()) == checksum(read_table(spark, warehouse))
    assert_delta_rs_agrees(spark, path)
    files = {f.split(f"/{TABLE}/", 1)[1] for f in read_table(spark, warehouse).inputFiles()}
    moved = {f for f in files if not f.startswith(f"segment_id={month.id}/")}
    assert {f.split("/")[0] for f in moved} == (
        {f"segment_id=d202401{d:02d}" for d in range(1, 32)} if promote_over else set()
    )
    # the loads' Spark writes checkpoint inline, the merges never; the job's upkeep writes the
    # rest: no more than checkpoint_every (10) commits past the newest, and each one readable
    checkpoints = sorted(int(p.name[:20]) for p in (path / "_delta_log").glob("*.checkpoint.parquet"))
    newest = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert checkpoints and newest is not None and newest.version - checkpoints[-1] <= 10, checkpoints
    assert not set(checkpoints) & set(merges), "no merge wrote a checkpoint"


def test_the_change_feed_holds_the_loads_and_nothing_for_merges(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    path = create_table(spark, warehouse, {"delta.enableChangeDataFeed": "true"})  # version 0
    load_days(spark, warehouse, kafka, JAN, 14, rows=10)  # versions 1..14
    handler = handler_for(spark, warehouse, kafka, ["week"])
    JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()
    merges = merge_versions(spark, warehouse)
    assert merges == [15, 16]

    def changes(first: int, last: int) -> Any:
        return (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", first)
            .option("endingVersion", last)
            .load(str(path))
        )

    assert changes(15, 16).count() == 0
    loads = changes(1, 14)
    assert {r._change_type for r in loads.select("_change_type").distinct().collect()} == {"insert"}
    loaded = loads.drop("_change_type", "_commit_version", "_commit_timestamp")
    assert (
        checksum(loaded)
        == checksum(read_table(spark, warehouse))
        == checksum(read_table(spark, warehouse, 14))
    )
    assert checksum(loaded)[0] == 140


@pytest.mark.parametrize(
    ("properties", "change"),
    [
        ({"delta.enableDeletionVectors": "true"}, "DELETE FROM {table} WHERE customer_id % 3 = 0"),
        ({"delta.columnMapping.mode": "name"}, "ALTER TABLE {table} RENAME COLUMN amount TO total"),
    ],
    ids=["deletion-vectors", "column-mapping"],
)
def test_merges_conserve_rows_on_tables_with_newer_delta_features(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    tmp_path: Path,
    properties: dict[str, str],
    change: str,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    path = create_table(spark, warehouse, properties)
    load_days(spark, warehouse, kafka, JAN, 7)
    spark.sql(change.format(table=f"delta.`{path}`"))
    changed = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    assert changed is not None and changed.operation in {"DELETE", "RENAME COLUMN"}
    if "DELETE" in change:  # the delete left deletion vectors, not rewritten files
        assert "deletionVector" in (path / "_delta_log" / f"{changed.version:020d}.json").read_text()
    before = checksum(read_table(spark, warehouse))
    assert 0 < before[0] <= 140

    handler = handler_for(spark, warehouse, kafka, ["week"])
    JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()

    assert (handler.stats.merges, handler.stats.failed_merges) == (1, 0)
    assert checksum(read_table(spark, warehouse)) == before
    (merge,) = merge_versions(spark, warehouse)
    assert data_change_flags(path, merge) == {False}
    assert {r.segment_id for r in read_table(spark, warehouse).select("segment_id").distinct().collect()} == {
        s.id for s in handler.catalog.segments(TABLE)
    }
    assert_delta_rs_agrees(spark, path)


def test_a_table_feature_a_merge_cannot_preserve_is_refused_by_name(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    create_table(spark, warehouse, {"delta.appendOnly": "true"})
    load_days(spark, warehouse, kafka, JAN, 7, rows=5)
    before = checksum(read_table(spark, warehouse))
    handler = handler_for(spark, warehouse, kafka, ["week"])
    JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()

    # refused before its first merge: quarantined with why, no merge tried
    assert results(kafka_bootstrap, kafka.results_topic) == []
    note = handler.catalog.quarantined(TABLE)
    assert note is not None and "delta.appendOnly=true" in note and "UnsupportedTableFeature" in note
    assert merge_versions(spark, warehouse) == []
    assert checksum(read_table(spark, warehouse)) == before

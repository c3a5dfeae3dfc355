"""A merge over well-sized files moves them into the output segment without rewriting a byte:
Delta's readers (delta-spark and delta-rs) see the new segment, time travel the old ones,
VACUUM keeps the files until a later rewrite, a replay is skipped, the catalog reads it back."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from deltalake import DeltaTable as RustDeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.client.loader import sample_rows
from compactor.delta.commit.transaction import DirectTransaction
from compactor.delta.content.fingerprint import spark_fingerprint
from compactor.delta.content.verify import verify_table
from compactor.delta.log.reads import read_commits, segment_sizes, segments_with_rows
from compactor.delta.paths import table_uri
from compactor.delta.rewrite import promote
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.table_ops.writes import write_segment
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.certificate import Certificate
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import CommitConflict, ContentMismatch
from tests.cli.test_verify import uncompressed  # noqa: F401 (a fixture)
from tests.delta.test_driver_merge import load as day_load
from tests.delta.test_log_reads import reader

pytestmark = pytest.mark.integration

WEEK = datetime(2024, 3, 4, tzinfo=UTC)


def load(spark: Any, warehouse: Path, n: int, rows: int = 50) -> Segment:
    start = WEEK + timedelta(weeks=n)
    end = start + timedelta(weeks=1)
    segment = Segment(f"w{n}", "t", TimeRange(start, end), loaded_at=end)
    return write_segment(spark, warehouse, segment, sample_rows(spark, start, end, rows, seed=n))


def data_files(warehouse: Path) -> set[str]:
    return {str(p.relative_to(warehouse)) for p in warehouse.rglob("*.parquet")}


def test_a_month_merge_over_well_sized_files_writes_no_data_byte(spark: Any, warehouse: Path) -> None:
    weeks = [load(spark, warehouse, n) for n in range(4)]
    path = table_uri(warehouse, "t")
    before_rows = rows_checksum(spark.read.format("delta").load(path))
    files_before = data_files(warehouse)
    plan = make_plan("t", "auto_merge", weeks, level="month")
    smallest = min((warehouse / f).stat().st_size for f in files_before)

    commit = execute_merge(spark, warehouse, plan, MergeSettings(promote_min_bytes=smallest))

    assert data_files(warehouse) == files_before, "no data file written"
    assert (commit.data_change, commit.records_out) == (False, 200)
    assert commit.bytes_out == sum((warehouse / f).stat().st_size for f in files_before)
    table = spark.read.format("delta").load(path)
    assert rows_checksum(table) == before_rows
    assert {r.segment_id for r in table.select("segment_id").distinct().collect()} == {plan.output.id}
    assert Counter(RustDeltaTable(path).to_pyarrow_table()["segment_id"].to_pylist()) == {plan.output.id: 200}
    old = spark.read.format("delta").option("versionAsOf", commit.version - 1).load(path)
    assert sorted(r.segment_id for r in old.select("segment_id").distinct().collect()) == [
        "w0",
        "w1",
        "w2",
        "w3",
    ]

    # the catalog's readers: sizes from the snapshot, presence from the log, the commit's record
    assert segment_sizes(spark, warehouse, "t") == {plan.output.id: (200, commit.bytes_out)}
    assert segments_with_rows(spark, reader(spark, warehouse), ["w0", "w3", plan.output.id]) == {
        plan.output.id
    }
    record = read_commits(spark, warehouse, "t")[-1]
    assert (record.op, record.removed, record.data_change) == ("merge", plan.input_ids, False)
    assert [(s.id, s.records, s.bytes) for s in record.added] == [(plan.output.id, 200, commit.bytes_out)]
    again = execute_merge(spark, warehouse, plan, MergeSettings(promote_min_bytes=smallest))
    assert again.already_done and again.version == commit.version, "a replay commits nothing"
    assert (again.records_out, again.bytes_out) == (200, commit.bytes_out), "and reads the sizes back"

    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        DeltaTable.forPath(spark, path).vacuum(0.0)
        assert data_files(warehouse) == files_before, "VACUUM keeps files the table still references"
        later = [*weeks[:0], Segment(plan.output.id, "t", plan.output.range, plan.output.loaded_at, 200)]
        fifth = load(spark, warehouse, 4)
        rewrite = make_plan("t", "auto_merge", [*later, fifth])
        execute_merge(spark, warehouse, rewrite)  # small files: rewritten as usual
        DeltaTable.forPath(spark, path).vacuum(0.0)
        assert not data_files(warehouse) & files_before, "rewritten away, then vacuumed"
        assert spark.read.format("delta").load(path).count() == 250
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")


def test_only_the_small_inputs_are_rewritten_in_the_same_commit(spark: Any, warehouse: Path) -> None:
    big = [load(spark, warehouse, n, rows=2000) for n in range(2)]
    big_files = data_files(warehouse)
    small = load(spark, warehouse, 2, rows=10)
    small_files = data_files(warehouse) - big_files
    path = table_uri(warehouse, "t")
    before = rows_checksum(spark.read.format("delta").load(path))
    plan = make_plan("t", "auto_merge", [*big, small], level="month")
    threshold = min((warehouse / f).stat().st_size for f in big_files)
    assert max((warehouse / f).stat().st_size for f in small_files) < threshold

    commit = execute_merge(spark, warehouse, plan, MergeSettings(promote_min_bytes=threshold))

    table = spark.read.format("delta").load(path)
    assert rows_checksum(table) == before and commit.records_out == 4010
    assert {r.segment_id for r in table.select("segment_id").distinct().collect()} == {plan.output.id}
    live = {"t/" + f.split("/t/", 1)[1] for f in table.inputFiles()}
    (written,) = live - big_files
    assert big_files < live and not small_files & live, "the big files moved, the small ones were rewritten"
    assert written.startswith(f"t/segment_id={plan.output.id}/")
    (record,) = [c for c in read_commits(spark, warehouse, "t") if c.op == "merge"]
    assert record.version == commit.version and not record.data_change


def test_a_promotion_that_loses_a_row_is_refused_before_its_commit(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewritten small inputs are certified as a merge; the whole output must hold the rows
    the log says the inputs show (a written file whose statistics count fewer rows here)."""
    big = [load(spark, warehouse, n, rows=2000) for n in range(2)]
    threshold = min((warehouse / f).stat().st_size for f in data_files(warehouse))
    plan = make_plan("t", "auto_merge", [*big, load(spark, warehouse, 2, rows=10)], level="month")
    settings = MergeSettings(promote_min_bytes=threshold)
    version = DeltaTable.forPath(spark, table_uri(warehouse, "t")).history(1).first()["version"]
    rewrite = promote._rewrite

    def changing(rows: DataFrame, *args: Any) -> tuple[DataFrame, dict[str, str]]:
        *settings, handed = args  # changed where the rows are handed to the writer's files

        def changed(out: DataFrame) -> DataFrame:
            return handed(out.withColumn("customer_id", F.col("customer_id") + 1))

        return rewrite(rows, *settings, changed)

    with monkeypatch.context() as patched:
        patched.setattr(promote, "_rewrite", changing)
        with pytest.raises(ContentMismatch, match=r"inputs 10 rows, [0-9a-f]{16} but output 10 rows"):
            execute_merge(spark, warehouse, plan, settings)
    with monkeypatch.context() as patched:
        patched.setattr(promote, "_rows", lambda add: 9)
        with pytest.raises(ContentMismatch, match=r"show a reader 4010 rows by the log, but .* hold 4009"):
            execute_merge(spark, warehouse, plan, settings)
    assert DeltaTable.forPath(spark, table_uri(warehouse, "t")).history(1).first()["version"] == version
    assert execute_merge(spark, warehouse, plan, settings).records_out == 4010, "unpatched, it commits"


def test_a_small_file_in_every_input_means_a_rewrite(spark: Any, warehouse: Path) -> None:
    weeks = [load(spark, warehouse, n) for n in range(2)]
    files_before = data_files(warehouse)
    biggest = max((warehouse / f).stat().st_size for f in files_before)
    commit = execute_merge(
        spark, warehouse, make_plan("t", "auto_merge", weeks), MergeSettings(promote_min_bytes=biggest + 1)
    )
    assert len(data_files(warehouse) - files_before) == 1, "one new file: the rewrite"
    assert commit.records_out == 100


def test_a_concurrent_delete_of_an_input_fails_the_move_as_a_conflict(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weeks = [load(spark, warehouse, n) for n in range(2)]
    path = table_uri(warehouse, "t")
    commit = DirectTransaction.commit

    def after_someone_deletes(self: DirectTransaction, *args: Any, **kwargs: Any) -> int:
        DeltaTable.forPath(spark, path).delete("segment_id = 'w1'")  # commits between read and commit
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(DirectTransaction, "commit", after_someone_deletes)
    with pytest.raises(CommitConflict, match="Concurrent"):
        execute_merge(
            spark, warehouse, make_plan("t", "auto_merge", weeks), MergeSettings(promote_min_bytes=1)
        )
    table = spark.read.format("delta").load(path)
    assert sorted(r.segment_id for r in table.select("segment_id").distinct().collect()) == ["w0"]
    assert table.count() == 50, "the deleted rows stay deleted: no file came back"


@pytest.mark.usefixtures("uncompressed")
def test_a_promotion_certifies_its_whole_output_and_verify_finds_a_moved_file_replaced(
    spark: Any, warehouse: Path
) -> None:
    """The moved files are read for their fingerprint alone: the certificate records what the output
    holds as a whole, so a moved file replaced later under its own name is found."""
    days = [day_load(spark, warehouse, "t", day) for day in range(3)]
    path = table_uri(warehouse, "t")
    frame = spark.read.format("delta").load(path)
    before = spark_fingerprint(frame, frame.columns)
    files = data_files(warehouse)
    smallest = min((warehouse / f).stat().st_size for f in files)
    commit = execute_merge(
        spark, warehouse, make_plan("t", "minor", days), MergeSettings(promote_min_bytes=smallest)
    )
    assert data_files(warehouse) == files, "every file moved, none written"
    history = DeltaTable.forPath(spark, path).history().where(F.col("version") == commit.version)
    (row,) = history.select("userMetadata").collect()
    certificate = Certificate.from_dict(json.loads(row["userMetadata"])["certificate"])
    assert certificate.inputs == certificate.output == before and before.rows == 90
    assert [c.verdict for c in verify_table(spark, warehouse, "t")] == ["holds"]

    value, planted = (1005).to_bytes(8, "little", signed=True), (1_000_005).to_bytes(8, "little", signed=True)
    (moved,) = [warehouse / f for f in files if value in (warehouse / f).read_bytes()]
    data = moved.read_bytes()
    assert data.count(value) == 1, "day 1's row 5 has k = 1005, once in its file"
    moved.write_bytes(data.replace(value, planted))
    (moved.parent / f".{moved.name}.crc").unlink()  # Hadoop's local checksum: no object store has one
    (checked,) = verify_table(spark, warehouse, "t")
    assert checked.verdict == "broken", checked.detail
    assert checked.output is not None and checked.output.rows == 90 and checked.output != before
    assert f"its output reads {checked.output} now, certified {certificate.output}" in checked.detail

"""Every merge, refresh and purge carries a content certificate, and one broken on purpose is
refused before its commit: on the driver's Arrow path and on Spark's, on real Spark and Delta."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.config.loading import load_config
from compactor.config.sort import SortConfig
from compactor.delta.commit.transaction import DirectTransaction
from compactor.delta.content.fingerprint import spark_fingerprint
from compactor.delta.content.verify import verify_table
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.rewrite import driver_merge, merge, refresh
from compactor.delta.rewrite.arrange import sort_each_file
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.rewrite.purge import purge_deleted_rows
from compactor.delta.rewrite.refresh import execute_refresh
from compactor.delta.table_ops.writes import write_segment
from compactor.domain.certificate import Certificate
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import ContentMismatch
from tests.delta.test_driver_merge import DAY, load

pytestmark = pytest.mark.integration

IN_DRIVER = MergeSettings()
BY_SPARK = MergeSettings(driver_max_bytes=0)
# two sorted files: a range partitioning samples the inputs first, so they are fingerprinted apart
BY_SPARK_SORTED = MergeSettings(driver_max_bytes=0, order=SortConfig(by=("k",)), target_file_bytes=4096)
PATHS = {"driver": IN_DRIVER, "spark": BY_SPARK, "spark, two sorted files": BY_SPARK_SORTED}


def table_with(spark: Any, warehouse: Path, table: str, days: int) -> list[Segment]:
    return [load(spark, warehouse, table, day) for day in range(days)]


def rows_of(spark: Any, warehouse: Path, table: str) -> DataFrame:
    return spark.read.format("delta").load(table_uri(warehouse, table))


def version_of(spark: Any, warehouse: Path, table: str) -> int:
    return int(DeltaTable.forPath(spark, table_uri(warehouse, table)).history(1).first()["version"])


def recorded(spark: Any, warehouse: Path, table: str, version: int) -> Certificate:
    history = DeltaTable.forPath(spark, table_uri(warehouse, table)).history()
    (row,) = history.where(F.col("version") == version).select("userMetadata").collect()
    return Certificate.from_dict(json.loads(row["userMetadata"])["certificate"])


@pytest.mark.parametrize("path", list(PATHS))
def test_a_merge_commits_the_certificate_of_the_rows_a_reader_saw(
    path: str, spark: Any, warehouse: Path
) -> None:
    segments = table_with(spark, warehouse, "t", 3)
    frame = rows_of(spark, warehouse, "t")
    before = spark_fingerprint(frame, frame.columns)
    commit = execute_merge(spark, warehouse, make_plan("t", "minor", segments), PATHS[path])
    certificate = recorded(spark, warehouse, "t", commit.version)
    assert certificate.inputs == certificate.output == before
    assert before.rows == 90
    after = rows_of(spark, warehouse, "t")
    assert spark_fingerprint(after, after.columns) == before
    assert {r[SEGMENT_COLUMN] for r in after.select(SEGMENT_COLUMN).distinct().collect()} == {
        commit.outputs[0].id
    }


def _first_key() -> Any:
    return F.col("k") == F.lit(1000)  # day 1's first row: in every merge of days 0-2


SPARK_BREAKS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "a row dropped": lambda out: out.where(~_first_key()),
    # the row repeated where it passes, not by reading the inputs again (a union with a second
    # read would count the inputs twice too)
    "a row written twice": lambda out: out.withColumn(
        "_copy", F.explode(F.when(_first_key(), F.array(F.lit(0), F.lit(1))).otherwise(F.array(F.lit(0))))
    ).drop("_copy"),
    "a value changed": lambda out: out.withColumn(
        "x", F.when(_first_key(), F.col("x") + 1).otherwise(F.col("x"))
    ),
}


@pytest.fixture(scope="module")
def untouched(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Segment]]:
    """One table of three days for the merges refused below: a refused merge commits nothing,
    so each test finds it as it was (and checks that it does)."""
    warehouse = tmp_path_factory.mktemp("untouched")
    return warehouse, table_with(spark, warehouse, "t", 3)


@pytest.mark.parametrize(
    ("fault", "path"),
    [(fault, "spark") for fault in SPARK_BREAKS] + [("a row dropped", "spark, two sorted files")],
)
def test_a_spark_merge_broken_on_purpose_is_refused_before_its_commit(
    fault: str, path: str, spark: Any, untouched: tuple[Path, list[Segment]], monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse, segments = untouched
    version = version_of(spark, warehouse, "t")
    layout = merge._layout

    def broken(source: DataFrame, *args: Any) -> tuple[DataFrame, dict[str, str]]:
        *settings, handed = args  # broken where the rows are handed to the writer's files
        return layout(source, *settings, lambda rows: handed(SPARK_BREAKS[fault](rows)))

    monkeypatch.setattr(merge, "_layout", broken)
    with pytest.raises(
        ContentMismatch, match=r"not committed: inputs 90 rows, [0-9a-f]{16} but output"
    ) as caught:
        execute_merge(spark, warehouse, make_plan("t", "minor", segments), PATHS[path])
    expected = {"a row dropped": "1 row(s) fewer", "a row written twice": "1 row(s) more"}
    assert expected.get(fault, "the same row count, different content") in str(caught.value)
    assert version_of(spark, warehouse, "t") == version, "nothing committed"
    ids = {
        r[SEGMENT_COLUMN] for r in rows_of(spark, warehouse, "t").select(SEGMENT_COLUMN).distinct().collect()
    }
    assert ids == {s.id for s in segments}


class _BrokenSort:
    """`pyarrow.compute` as the driver path sees it, with a sort that loses or repeats a row."""

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def __getattr__(self, name: str) -> Any:
        return getattr(pa.compute, name)

    def sort_indices(self, *args: Any, **kwargs: Any) -> pa.Array:
        indices = pa.compute.sort_indices(*args, **kwargs).to_pylist()
        broken = indices[1:] if self.fault == "a row dropped" else [*indices, indices[0]]
        return pa.array(broken, pa.uint64())


@pytest.mark.parametrize("fault", ["a row dropped", "a row written twice"])
def test_a_driver_merge_broken_on_purpose_is_refused_before_its_commit(
    fault: str, spark: Any, untouched: tuple[Path, list[Segment]], monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse, segments = untouched
    version = version_of(spark, warehouse, "t")
    monkeypatch.setattr(driver_merge, "pc", _BrokenSort(fault))
    settings = MergeSettings(order=SortConfig(by=("k",)))
    with pytest.raises(ContentMismatch, match="not committed: inputs 90 rows"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments), settings)
    assert version_of(spark, warehouse, "t") == version, "nothing committed"


def with_a_deleted_row(spark: Any, warehouse: Path, key: int = 1005) -> list[Segment]:
    """Two days; another writer's DELETE of the row of `key` (day 1's by default), in a deletion
    vector."""
    segments = table_with(spark, warehouse, "t", 2)
    uri = table_uri(warehouse, "t")
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    DeltaTable.forPath(spark, uri).delete(F.col("k") == key)
    return segments


def reads_ignoring_vectors(spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every transaction's read made to bring the rows deletion vectors hide back."""
    uri = table_uri(warehouse, "t")
    read = DirectTransaction.read

    def without_vectors(self: DirectTransaction, files: Any, predicate: Any) -> DataFrame:
        frame = read(self, files, predicate)
        raw = spark.read.parquet(*[f"{uri}/{f.path}" for f in files])
        return raw.select(*[F.col(c) if c in raw.columns else F.lit(None).alias(c) for c in frame.columns])

    monkeypatch.setattr(DirectTransaction, "read", without_vectors)


def test_a_read_that_brings_a_deleted_row_back_is_refused(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The certificate's inputs are what the merge read; the log says what a reader sees (rows
    less those its deletion vectors hide): a read that ignores a deletion vector reads more."""
    segments = with_a_deleted_row(spark, warehouse, key=5)
    version = version_of(spark, warehouse, "t")
    reads_ignoring_vectors(spark, warehouse, monkeypatch)
    with pytest.raises(ContentMismatch, match=r"show a reader 59 rows .* but 60 were read"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments), BY_SPARK)
    assert version_of(spark, warehouse, "t") == version, "nothing committed"


def test_files_that_hold_other_than_the_rows_handed_to_the_writer_are_refused(
    spark: Any, untouched: tuple[Path, list[Segment]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The certificate's output is what reached Delta's writer; the written files' statistics say
    what a reader will find: a file the writer lost (or wrote twice) shows between them."""
    warehouse, segments = untouched
    version = version_of(spark, warehouse, "t")
    write = DirectTransaction.write

    def one_file_lost(
        self: DirectTransaction, data: DataFrame, options: dict[str, str], into: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        return write(self, data.repartition(2), options, into)[1:]

    monkeypatch.setattr(DirectTransaction, "write", one_file_lost)
    with pytest.raises(ContentMismatch, match=r"90 rows handed to the writer, but its files hold [0-9]+$"):
        execute_merge(spark, warehouse, make_plan("t", "minor", segments), BY_SPARK)
    assert version_of(spark, warehouse, "t") == version, "nothing committed"


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_with_certificates_off_a_merge_commits_without_one(path: str, spark: Any, warehouse: Path) -> None:
    """`operations.certify_merges: false`: the escape hatch, and the baseline of the benchmarks."""
    segments = table_with(spark, warehouse, "t", 2)
    settings = dataclasses.replace(PATHS[path], certify=False)
    commit = execute_merge(spark, warehouse, make_plan("t", "minor", segments), settings)
    assert commit.certificate is None and commit.records_out == 60
    history = DeltaTable.forPath(spark, table_uri(warehouse, "t")).history(1).first()
    assert "certificate" not in json.loads(history["userMetadata"])


def test_a_merge_of_maps_arrays_and_structs_holds_its_certificate(spark: Any, warehouse: Path) -> None:
    """Spark cannot hash a map: such a column is fingerprinted as its JSON text, which a merge,
    copying each row's entries in their order, leaves unchanged."""
    segments = []
    for day in range(2):
        frame = spark.range(20).select(
            (F.col("id") + day * 100).alias("k"),
            F.create_map(F.lit("n"), F.col("id"), F.lit("d"), F.lit(day).cast("long")).alias("tags"),
            F.array(F.col("id"), F.lit(None).cast("long")).alias("list"),
            F.struct(F.col("id").alias("a"), F.create_map(F.lit("x"), F.col("id")).alias("m")).alias(
                "nested"
            ),
        )
        start = DAY + timedelta(days=day)
        segment = Segment(f"m{day}", "t", TimeRange(start, start + timedelta(days=1)), loaded_at=start)
        segments.append(write_segment(spark, warehouse, segment, frame))
    commit = execute_merge(spark, warehouse, make_plan("t", "minor", segments), BY_SPARK)
    certificate = recorded(spark, warehouse, "t", commit.version)
    assert certificate.holds and certificate.inputs.rows == 40
    changed = rows_of(spark, warehouse, "t").withColumn(
        "tags",
        F.when(F.col("k") == 5, F.create_map(F.lit("n"), F.lit(6).cast("long"))).otherwise(F.col("tags")),
    )
    assert spark_fingerprint(changed, changed.columns) != certificate.output, "a map's change is seen"


# -- refresh ----------------------------------------------------------------------------------

REFRESH_LAYOUT = {
    "time_column": "ts",
    "bucket_time_period": "1d",
    "columns": {"ts": {"type": "timestamp"}, "k": {"type": "bigint"}, "v": {"type": "double"}},
}
# a layout that adds a column: the refresh goes through Delta's generic overwrite (a new schema)
WIDER_LAYOUT = REFRESH_LAYOUT | {"columns": REFRESH_LAYOUT["columns"] | {"note": {"type": "string"}}}
REFRESH_RULES: dict[str, dict[str, Any]] = {  # a row kept, rows changed (rounded), rows folded
    "concat": {},
    "dedup": {"merge_type": "dedup", "round_bucket_time_period": "1d"},
    "rollup": {"merge_type": "rollup", "round_bucket_time_period": "1d", "aggregations": {"v": "sum"}},
}


def refresh_settings(rule: dict[str, Any], layout: dict[str, Any] = REFRESH_LAYOUT) -> MergeSettings:
    config = load_config(
        {
            "tables": {
                "t": {
                    "config_version": 2,
                    "layout": layout,
                    "rules": [{"rule": "refresh", "trigger": "manual", **rule}],
                }
            }
        }
    )
    return MergeSettings.of(config.for_table("t"))


def refresh_table(spark: Any, warehouse: Path) -> list[Segment]:
    """Two hourly loads of ten rows, keys 0-4 twice each in the second (dedup and rollup fold them)."""
    segments = []
    for hour in range(2):
        start = DAY + timedelta(hours=hour)
        data = spark.range(10).select(
            F.timestamp_seconds(F.lit(int(start.timestamp())) + F.col("id") * 60).alias("ts"),
            (F.col("id") % 5 if hour else F.col("id") + 100).alias("k"),
            (F.col("id") * 0.5).alias("v"),
        )
        segment = Segment(f"h{hour}", "t", TimeRange(start, start + timedelta(hours=1)), loaded_at=start)
        segments.append(write_segment(spark, warehouse, segment, data))
    return segments


@pytest.mark.parametrize("kind", list(REFRESH_RULES))
def test_a_refresh_certifies_the_rows_its_rule_makes_of_the_inputs(
    kind: str, spark: Any, warehouse: Path
) -> None:
    segments = refresh_table(spark, warehouse)
    before = rows_of(spark, warehouse, "t")
    read = spark_fingerprint(before, before.columns)
    plan = make_plan("t", "refresh", segments, allow_single=True)
    commit = execute_refresh(spark, warehouse, plan, refresh_settings(REFRESH_RULES[kind]))
    certificate = recorded(spark, warehouse, "t", commit.version)
    after = rows_of(spark, warehouse, "t")
    assert certificate.holds and certificate.output == spark_fingerprint(after, after.columns)
    assert commit.certificate == certificate
    expected_rows = {"concat": 20, "dedup": 20, "rollup": 15}[kind]
    assert certificate.output.rows == after.count() == expected_rows
    if kind == "concat":  # the rows as they were: the certificate is the inputs' own fingerprint
        assert certificate.inputs == read
    else:
        assert certificate.inputs != read
    (checked,) = verify_table(spark, warehouse, "t")  # and `compactor verify` finds it holding
    assert (checked.version, checked.rule, checked.verdict) == (commit.version, "refresh", "holds")
    assert checked.inputs == (read if kind == "concat" else None) and checked.output == certificate.output


def test_a_refresh_that_reorders_columns_is_checked_but_records_no_certificate(
    spark: Any, warehouse: Path
) -> None:
    """A partial overwrite keeps the table's column order: a certificate over the layout's order
    is not what `verify` would recompute, so none is recorded (the check before the write ran)."""
    segments = refresh_table(spark, warehouse)
    reordered = REFRESH_LAYOUT | {"columns": {"k": {"type": "bigint"}, "ts": {"type": "timestamp"},
                                              "note": {"type": "string"}, "v": {"type": "double"}}}  # fmt: skip
    plan = make_plan("t", "refresh", segments, allow_single=True)
    commit = execute_refresh(spark, warehouse, plan, refresh_settings({}, reordered))
    history = DeltaTable.forPath(spark, table_uri(warehouse, "t")).history(1).first()
    assert "certificate" not in json.loads(history["userMetadata"]) and commit.certificate is None
    (checked,) = verify_table(spark, warehouse, "t")
    assert checked.verdict != "broken", checked.detail


# the certificate's arithmetic is proven on merges (above): here, that a refresh's wiring refuses
REFRESH_BREAKS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "a row dropped": lambda out: out.where(F.col("k") != F.lit(3)),
    "a value changed": lambda out: out.withColumn(
        "v", F.when(F.col("k") == F.lit(103), F.col("v") + 1).otherwise(F.col("v"))
    ),
}


@pytest.mark.parametrize("through", ["direct commit", "overwrite"])
@pytest.mark.parametrize("fault", list(REFRESH_BREAKS))
def test_a_refresh_broken_on_purpose_is_refused_before_its_commit(
    fault: str, through: str, spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through Delta's generic overwrite (a layout that adds a column), before it writes anything."""
    segments = refresh_table(spark, warehouse)
    version = version_of(spark, warehouse, "t")

    def broken(frame: DataFrame, *args: Any) -> DataFrame:
        return REFRESH_BREAKS[fault](sort_each_file(frame, *args))

    monkeypatch.setattr(refresh, "sort_each_file", broken)
    plan = make_plan("t", "refresh", segments, allow_single=True)
    layout = WIDER_LAYOUT if through == "overwrite" else REFRESH_LAYOUT
    with pytest.raises(ContentMismatch, match=r"not committed: inputs 20 rows, [0-9a-f]{16} but output"):
        execute_refresh(spark, warehouse, plan, refresh_settings({}, layout))
    assert version_of(spark, warehouse, "t") == version, "nothing committed"
    assert "note" not in rows_of(spark, warehouse, "t").columns


def test_a_refresh_through_the_overwrite_is_certified_before_it_writes(spark: Any, warehouse: Path) -> None:
    segments = refresh_table(spark, warehouse)
    plan = make_plan("t", "refresh", segments, allow_single=True)
    commit = execute_refresh(spark, warehouse, plan, refresh_settings({}, WIDER_LAYOUT))
    after = rows_of(spark, warehouse, "t")
    assert "note" in after.columns and after.count() == 20
    history = DeltaTable.forPath(spark, table_uri(warehouse, "t")).history(1).first()
    assert "exact_sizes" not in json.loads(history["userMetadata"]), "written by the generic overwrite"
    certificate = recorded(spark, warehouse, "t", commit.version)
    assert certificate.holds and certificate.output == spark_fingerprint(after, after.columns)
    assert commit.certificate == certificate
    (checked,) = verify_table(spark, warehouse, "t")
    assert checked.verdict == "holds", checked.detail


# -- purge ------------------------------------------------------------------------------------


def test_a_purge_certifies_the_rows_a_reader_saw(spark: Any, warehouse: Path) -> None:
    segments = with_a_deleted_row(spark, warehouse)
    before = rows_of(spark, warehouse, "t")
    seen = spark_fingerprint(before, before.columns)
    version = purge_deleted_rows(spark, warehouse, segments)
    assert version == version_of(spark, warehouse, "t")
    certificate = recorded(spark, warehouse, "t", version)
    carrier = spark.read.parquet(*vector_files(spark, warehouse, version - 1)).where(F.col("k") != 1005)
    assert certificate.inputs == certificate.output == spark_fingerprint(carrier, before.columns)
    assert certificate.inputs.rows == carrier.count() > 0, "the rows of the one file with a vector"
    after = rows_of(spark, warehouse, "t")
    assert spark_fingerprint(after, after.columns) == seen and seen.rows == 59
    history = DeltaTable.forPath(spark, table_uri(warehouse, "t")).history(1).first()
    assert history["operation"] == "REORG" and '"op":"purge"' in history["userMetadata"]
    assert vector_files(spark, warehouse, version) == []
    assert purge_deleted_rows(spark, warehouse, segments) is None, "no vector left: nothing to commit"
    (checked,) = verify_table(spark, warehouse, "t")  # its segments' rows before and after it
    assert (checked.version, checked.verdict, checked.inputs) == (version, "holds", seen)
    assert checked.detail == "59 rows, its segments before and after"


def vector_files(spark: Any, warehouse: Path, version: int) -> list[str]:
    """The table's live files that carry a deletion vector at `version`, from its log."""
    live: dict[str, bool] = {}
    for commit in sorted((warehouse / "t" / "_delta_log").glob("*.json")):
        if int(commit.stem) > version:
            break
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        for action in actions:  # a commit's removes first: a vector re-adds the path it removes
            if "remove" in action:
                live.pop(action["remove"]["path"], None)
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"].get("deletionVector") is not None
    return [f"{table_uri(warehouse, 't')}/{path}" for path, vector in live.items() if vector]


def test_a_purge_that_brings_a_deleted_row_back_is_refused(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segments = with_a_deleted_row(spark, warehouse)
    version = version_of(spark, warehouse, "t")
    reads_ignoring_vectors(spark, warehouse, monkeypatch)
    with pytest.raises(ContentMismatch, match=r"purge of d0, d1 not committed: .* show a reader 14 rows"):
        purge_deleted_rows(spark, warehouse, segments)
    assert version_of(spark, warehouse, "t") == version, "nothing committed"

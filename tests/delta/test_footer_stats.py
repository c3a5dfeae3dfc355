"""A file's Delta statistics read from its Parquet footer are the ones Delta collects from its rows,
value for value (NaN and the infinities included), but for what the footer cannot give exactly
(left out: a string column over 4 KiB, dates and times before 1900); a merge's files get them
with Delta's collection off, on a local disk and on S3; tables whose statistics the footer does
not model keep Delta's."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.delta.commit import footer_stats as stats_module
from compactor.delta.commit import transaction
from compactor.delta.commit.footer_stats import footer_stats, truncate_max
from compactor.delta.commit.transaction import STATS_FROM_FOOTERS, DirectTransaction
from compactor.delta.files import HadoopFiles
from compactor.delta.log.live_files import table_live_files
from compactor.delta.paths import data_file_uri, table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment
from tests.conftest import S3Server
from tests.delta.test_driver_merge import load

pytestmark = pytest.mark.integration

TOP = "\U0010ffff"
# columns whose bounds the footer leaves out, and why
UNBOUNDED = {"huge": "over 4 KiB", "old": "before 1900"}


def every_kind(spark: Any, n: int = 600) -> DataFrame:
    """Every column type Delta keeps statistics of, with the values at their edges: nulls, a
    column of nulls only, micro- and sub-millisecond times, negative decimals written as integers
    and as fixed-length bytes, strings past the prefix with surrogate pairs and U+10FFFF at the cut."""
    i = F.col("id")
    return spark.range(n).select(
        (F.timestamp_seconds(F.lit(1_717_200_000) + i * 997 + F.lit(0.123456))).alias("ts"),
        F.to_timestamp_ntz(F.timestamp_seconds(F.lit(1_717_200_000) - i * 31 + F.lit(0.9995))).alias("ntz"),
        F.date_add(F.lit("2024-06-01").cast("date"), (i % 400 - 200).cast("int")).alias("d"),
        (i * 7919 - 1_000_000).alias("k"),
        (i % 7 - 3).cast("int").alias("i"),
        (i % 5).cast("short").alias("s"),
        (i % 100 - 50).cast("byte").alias("b"),
        F.when(i == 7, F.lit(float("nan")))
        .when(i == 8, F.lit(float("-inf")))
        .when(i == 9, F.lit(-0.0))
        .otherwise(i * 1.5 - 9)
        .alias("x"),
        (i / 3).cast("float").alias("f"),
        ((i * 104729) % 100000 / 100 - 400).cast("decimal(10,2)").alias("amount"),
        (i / 10_000_000).cast("decimal(10,7)").alias("tiny"),
        (i * 123456789 - 5e10).cast("decimal(30,4)").alias("wide"),
        F.when(i % 4 == 0, F.lit(None))
        .otherwise(
            F.concat(F.lit("a string longer than Delta's thirty-two characters, ünï "), i.cast("string"))
        )
        .alias("text"),
        F.concat(F.lit("a" * 31 + "\U0001f600" * 3), i.cast("string")).alias("pairs"),  # a pair at the cut
        F.concat(F.lit("x" * 31), F.lit(TOP * 3), F.lit(TOP), (i % 3).cast("string")).alias("tops"),
        F.concat(F.lit("~" * 31 + "\x7f"), i.cast("string")).alias("dels"),
        F.concat(F.lit("h" * 5000), i.cast("string")).alias("huge"),
        F.lit(None).cast("string").alias("nothing"),
        F.timestamp_seconds(F.lit(-2_300_000_000) + i).alias("old"),
        (i % 2 == 0).alias("flag"),
        F.when(i % 3 == 0, F.lit(None)).otherwise(F.unhex(F.hex(i))).alias("bin"),
        F.lit("p").alias("segment_id"),
    )


@contextmanager
def row_groups_of(spark: Any, size: int) -> Iterator[None]:
    """Parquet row groups of about `size` bytes (a file's statistics then sum several)."""
    conf = spark._jsc.hadoopConfiguration()
    before = conf.get("parquet.block.size")
    conf.set("parquet.block.size", str(size))
    try:
        yield
    finally:
        conf.unset("parquet.block.size") if before is None else conf.set("parquet.block.size", before)


def log_adds(spark: Any, path: str) -> list[dict[str, Any]]:
    """The `add` actions of the table's live files."""
    live = table_live_files(spark, path, "t")
    return [json.loads(f.action)["add"] for f in live.at(live.log.latest_version()).everything()]


def without_unbounded(stats: dict[str, Any]) -> dict[str, Any]:
    """Delta's statistics less what the footers cannot say: the bounds of `UNBOUNDED`'s columns,
    and the null count of one whose values Parquet's writer kept no statistics of at all."""
    left_out = {"minValues": set(UNBOUNDED), "maxValues": set(UNBOUNDED), "nullCount": {"huge"}}
    return {
        key: {c: v for c, v in value.items() if c not in left_out[key]} if key in left_out else value
        for key, value in stats.items()
    }


@pytest.fixture(scope="module")
def delta_written(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    """A table of `every_kind` written by Delta with its own statistics, in three files of several
    row groups each, with deletion vectors on (so statistics say `tightBounds`)."""
    path = str(tmp_path_factory.mktemp("footer_stats") / "kinds")
    with row_groups_of(spark, 64 << 10):
        (
            every_kind(spark)
            .repartition(3)
            .write.format("delta")
            .partitionBy("segment_id")
            .option("delta.enableDeletionVectors", "true")
            .save(path)
        )
    return path, log_adds(spark, path)


def test_footer_statistics_are_deltas_but_the_bounds_it_cannot_give(
    spark: Any, delta_written: tuple[str, list[dict[str, Any]]]
) -> None:
    path, adds = delta_written
    txn = DirectTransaction(spark, path)
    files = HadoopFiles(spark)
    assert len(adds) == 3
    for add in adds:
        uri = data_file_uri(path, add["path"])
        footer = files.parquet_footer(uri, files_size(uri))
        assert footer.num_row_groups > 1
        ours, deltas = json.loads(footer_stats(footer, txn.protocol, txn.metadata)), json.loads(add["stats"])
        assert ours == without_unbounded(deltas)
        assert set(deltas["minValues"]) - set(ours["minValues"]) == set(UNBOUNDED)
        assert "nothing" not in deltas["minValues"] and ours["nullCount"]["nothing"] == ours["numRecords"]
        assert ours["tightBounds"] is True
        # the cases the port of Delta's string truncation must get right are in this data
        assert deltas["maxValues"]["tops"] != deltas["maxValues"]["tops"][:32]


def files_size(uri: str) -> int:
    return Path(uri.removeprefix("file:")).stat().st_size


def test_a_merge_written_by_spark_takes_its_statistics_from_the_footers(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge's files get their statistics from their footers (the transaction reads one per
    file, and none with the footers switched off), equal to what Delta collects from the rows."""
    read: list[str] = []
    real = transaction.footer_stats

    def counted(footer: Any, protocol: Any, metadata: Any) -> str:
        read.append(footer.created_by)
        return real(footer, protocol, metadata)

    monkeypatch.setattr(transaction, "footer_stats", counted)
    results, footers = {}, {}
    for name, from_footers in (("ours", "true"), ("deltas", "false")):
        warehouse = tmp_path / name
        segments = [load(spark, warehouse, "t", day) for day in range(3)]
        spark.conf.set(STATS_FROM_FOOTERS, from_footers)
        before = len(read)
        try:
            commit = execute_merge(
                spark, warehouse, make_plan("t", "minor", segments), MergeSettings(driver_max_bytes=0)
            )
        finally:
            spark.conf.unset(STATS_FROM_FOOTERS)
        footers[name] = len(read) - before
        (add,) = [
            a for a in log_adds(spark, table_uri(warehouse, "t")) if f"{commit.outputs[0].id}" in a["path"]
        ]
        results[name] = json.loads(add["stats"])
        assert commit.records_out == 90
    assert footers == {"ours": 1, "deltas": 0}
    assert results["ours"] == results["deltas"]


def test_a_merge_on_s3_reads_its_footers_through_the_store(
    spark: Any, s3: S3Server, unique: Callable[[str], str]
) -> None:
    warehouse = s3.location(unique("footers"))
    segments: list[Segment] = [load(spark, warehouse, "t", day) for day in range(2)]
    path = table_uri(warehouse, "t")
    before = rows_checksum(spark.read.format("delta").load(path))
    commit = execute_merge(
        spark, warehouse, make_plan("t", "minor", segments), MergeSettings(driver_max_bytes=0)
    )
    (add,) = [a for a in log_adds(spark, path) if commit.outputs[0].id in a["path"]]
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 60 and stats["nullCount"]["text"] == 16
    assert stats["minValues"]["k"] == 0 and stats["maxValues"]["x"] == 43.5
    assert rows_checksum(spark.read.format("delta").load(path)) == before


@pytest.mark.parametrize(
    ("configuration", "reason"),
    [
        ({"delta.columnMapping.mode": "name"}, "column mapping"),
        ({"delta.dataSkippingStatsColumns": "id"}, "dataSkippingStatsColumns"),
    ],
)
def test_tables_the_footers_do_not_model_keep_deltas_collection(
    spark: Any, tmp_path: Path, configuration: dict[str, str], reason: str
) -> None:
    path = str(tmp_path / "t")
    writer = (
        spark.range(3).withColumn("segment_id", F.lit("a")).write.format("delta").partitionBy("segment_id")
    )
    for key, value in configuration.items():
        writer = writer.option(key, value)
    writer.save(path)
    refused = DirectTransaction(spark, path).footer_stats_refusal()
    assert refused is not None and reason in refused


def test_a_struct_column_keeps_deltas_collection(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    spark.range(3).select(F.struct("id").alias("s"), F.lit("a").alias("segment_id")).write.format(
        "delta"
    ).partitionBy("segment_id").save(path)
    refused = DirectTransaction(spark, path).footer_stats_refusal()
    assert refused is not None and "column 's'" in refused


_UNITS = st.sampled_from(["a", "~", "\x7f", "\x80", "é", "\uffff", "\U0001f600", TOP, "\U00010000"])


@settings(max_examples=300, deadline=None)
@given(text=st.lists(_UNITS, max_size=80).map("".join), prefix=st.integers(min_value=1, max_value=40))
def test_the_maximum_is_cut_as_delta_cuts_it(spark: Any, text: str, prefix: int) -> None:
    """The port of `truncateMaxStringAgg` against Delta's own, on strings of the characters
    around each of its branches (ASCII, U+007F, surrogate pairs, U+10FFFF)."""
    collection = spark._jvm.org.apache.spark.sql.delta.stats.StatisticsCollection
    assert truncate_max(text, prefix) == collection.truncateMaxStringAgg(prefix, text)


def test_refusal_names_a_session_zone_other_than_utc() -> None:
    metadata = {
        "schemaString": json.dumps({"fields": [{"name": "ts", "type": "timestamp"}]}),
        "configuration": {},
    }
    refused = stats_module.refusal({"minReaderVersion": 1, "minWriterVersion": 2}, metadata, "Europe/Paris")
    assert refused is not None and "Europe/Paris" in refused
    assert stats_module.refusal({"minReaderVersion": 1, "minWriterVersion": 2}, metadata, "UTC") is None


def test_a_data_files_uri_is_decoded_and_resolved_against_its_table() -> None:
    assert (
        data_file_uri("s3a://b/wh/t/", "segment_id=a%20b/part-0.parquet")
        == "s3a://b/wh/t/segment_id=a b/part-0.parquet"
    )
    assert data_file_uri("s3a://b/wh/t", "s3a://b/other/x%3Ay.parquet") == "s3a://b/other/x:y.parquet"
    assert data_file_uri("/wh/t", "/abs/p.parquet") == "/abs/p.parquet"

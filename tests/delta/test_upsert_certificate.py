"""An upsert merge's certificate proves it wrote the rows it chose; its winners check proves it
chose the rows the key index says its inputs win (`domain.certificate.Winners`). A merge that
keeps a key's loser passes the first and is refused by the second, before its commit, on real
Spark and Delta, on plain tables and tables with row tracking."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import Column
from pyspark.sql import functions as F

from compactor.catalog.key_index import KeyIndex
from compactor.config.layout import UpsertConfig
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.paths import table_uri
from compactor.delta.rewrite import upsert as upsert_rows
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.domain.certificate import Fingerprint, IndexedWinners
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import ContentMismatch
from tests.delta.test_certificate import recorded

pytestmark = pytest.mark.integration

UPSERT = UpsertConfig(primary_key=("k",), comparison_column="v")
SETTINGS = MergeSettings(upsert=UPSERT)
T0 = datetime(2024, 5, 1, tzinfo=UTC)
KINDS = {"plain": "", "row tracking": "TBLPROPERTIES ('delta.enableRowTracking' = 'true')"}


def create(spark: Any, warehouse: Path, kind: str) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{table_uri(warehouse, 't')}` (k BIGINT, v DOUBLE, note STRING, "
        f"segment_id STRING) USING delta PARTITIONED BY (segment_id) {KINDS[kind]}"
    )


def append(spark: Any, warehouse: Path, n: int, first: int, last: int, v: Column) -> Segment:
    """Load `s<n>`: keys first..last-1, comparison value `v`, loaded n hours after T0."""
    when = T0 + timedelta(hours=n)
    rows = spark.range(first, last).select(
        F.col("id").alias("k"),
        v.cast("double").alias("v"),
        F.concat(F.lit(f"s{n}-"), F.col("id")).alias("note"),
    )
    segment = Segment(
        f"s{n}", "t", TimeRange(when, when + timedelta(hours=1)), loaded_at=when, records=last - first
    )
    (
        rows.withColumn("segment_id", F.lit(segment.id))
        .write.format("delta")
        .mode("append")
        .option("userMetadata", commit_metadata("load", [segment]))
        .save(table_uri(warehouse, "t"))
    )
    return segment


def three_loads(spark: Any, warehouse: Path, kind: str) -> list[Segment]:
    """s0: keys 0-19; s1: keys 5-24, higher values (it wins 5-19 from s0); s2: keys 20-29 with value
    0 (s1 keeps 20-24, s2 wins 25-29). A merge of s0 and s1 keeps 5 + 20 rows."""
    create(spark, warehouse, kind)
    return [
        append(spark, warehouse, 0, 0, 20, F.col("id") * 0.5),
        append(spark, warehouse, 1, 5, 25, F.col("id") * 0.5 + 1),
        append(spark, warehouse, 2, 20, 30, F.lit(0)),
    ]


def index_of(spark: Any, warehouse: Path, segments: list[Segment]) -> KeyIndex:
    """The key index the stream keeps, read from the table as a first use reads it."""
    index = KeyIndex()
    index.absorb(segments, upsert_rows.key_rows(spark, warehouse, "t", UPSERT, None))
    return index


def expected(index: KeyIndex, inputs: list[Segment], live: list[Segment]) -> IndexedWinners:
    found = index.winners_of([s.id for s in inputs])
    assert found is not None
    return IndexedWinners(Fingerprint.of(*found), {s.id: s.records for s in live})


def order(segments: list[Segment]) -> dict[str, datetime]:
    return {s.id: s.loaded_at for s in segments}


def version(spark: Any, warehouse: Path) -> int:
    return int(DeltaTable.forPath(spark, table_uri(warehouse, "t")).history(1).first()["version"])


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_upsert_merge_commits_its_winners_checked_against_the_key_index(
    kind: str, spark: Any, warehouse: Path
) -> None:
    segments = three_loads(spark, warehouse, kind)
    inputs = segments[:2]
    winners = expected(index_of(spark, warehouse, segments), inputs, segments)
    assert winners.winners.rows == 25
    plan = make_plan("t", "upsert_compaction", inputs)
    commit = execute_merge(spark, warehouse, plan, SETTINGS, load_order=order(segments), winners=winners)
    assert commit.records_out == 25
    certificate = recorded(spark, warehouse, "t", commit.version)
    assert certificate.winners is not None and certificate.holds
    assert certificate.winners.index == certificate.winners.kept == winners.winners
    assert certificate.inputs == certificate.output and certificate.output.rows == 25


@pytest.fixture
def losers_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The merge's ranking broken on purpose: the lowest comparison value wins in Spark."""
    ranking = upsert_rows._winner_order

    def lowest_first(data: Any, upsert: UpsertConfig) -> list[Column]:
        return [F.col(upsert.comparison_column).asc(), *ranking(data, upsert)[1:]]

    monkeypatch.setattr(upsert_rows, "_winner_order", lowest_first)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.usefixtures("losers_kept")
def test_an_upsert_merge_that_keeps_losers_is_refused_before_its_commit(
    kind: str, spark: Any, warehouse: Path
) -> None:
    segments = three_loads(spark, warehouse, kind)
    winners = expected(index_of(spark, warehouse, segments), segments[:2], segments)
    before = version(spark, warehouse)
    plan = make_plan("t", "upsert_compaction", segments[:2])
    with pytest.raises(
        ContentMismatch, match=r"the key index says the inputs win 25 rows, [0-9a-f]{16} but"
    ) as caught:
        execute_merge(spark, warehouse, plan, SETTINGS, load_order=order(segments), winners=winners)
    # s0 now wins 0-19 (its lower values) and s2 takes 20-24 (value 0): 20 rows kept, 5 fewer
    assert "but the merge kept 20 rows" in str(caught.value) and "5 row(s) fewer" in str(caught.value)
    assert "inputs 20 rows" not in str(caught.value), "the certificate itself held: it wrote what it chose"
    assert version(spark, warehouse) == before, "nothing committed"


@pytest.mark.usefixtures("losers_kept")
def test_without_the_index_the_certificate_alone_cannot_see_a_loser_kept(spark: Any, warehouse: Path) -> None:
    """Why the second opinion exists: the broken merge above, with no index to check against,
    commits with a certificate that holds."""
    segments = three_loads(spark, warehouse, "plain")
    commit = execute_merge(
        spark,
        warehouse,
        make_plan("t", "upsert_compaction", segments[:2]),
        SETTINGS,
        load_order=order(segments),
    )
    certificate = recorded(spark, warehouse, "t", commit.version)
    assert certificate.holds and certificate.winners is None and commit.records_out == 20


def test_a_load_the_index_has_not_read_leaves_the_merge_unchecked_not_refused(
    spark: Any, warehouse: Path
) -> None:
    """A load after the index looked can win keys the inputs won by the index: the table the merge
    reads is not the one the index knew, so the merge goes without the check (and is right)."""
    segments = three_loads(spark, warehouse, "plain")
    winners = expected(index_of(spark, warehouse, segments), segments[:2], segments)
    late = append(spark, warehouse, 3, 0, 5, F.lit(100))  # wins keys 0-4 from s0
    plan = make_plan("t", "upsert_compaction", segments[:2])
    commit = execute_merge(
        spark, warehouse, plan, SETTINGS, load_order=order([*segments, late]), winners=winners
    )
    assert commit.records_out == 20, "keys 0-4 went to the late load"
    certificate = recorded(spark, warehouse, "t", commit.version)
    assert certificate.holds and certificate.winners is None

"""Tables with a feature the direct commit once left to Delta's generic overwrite (type widening,
variants, Iceberg compatibility; each also under its preview name) merge through the direct commit,
certified: the rows exact, the protocol unchanged, the certificate in the commit. Delta's own
transactional writer and commit apply each feature there, as on any write. (The job's view of
every table kind, on Kafka, is tests/e2e/test_table_kinds.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark.sql import functions as F

from compactor.delta.content.fingerprint import spark_fingerprint
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.spark_store import SparkTableStore
from compactor.domain.certificate import Certificate
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange

pytestmark = pytest.mark.integration

T0 = datetime(2024, 1, 1, tzinfo=UTC)


class Kind(NamedTuple):
    column: str  # the type of column x
    properties: str
    value: str  # x's value as SQL over the row's `id`
    widen: bool = False  # x is widened from INT to BIGINT before the last load


VARIANT = "parse_json(concat('{\"a\": ', id, ', \"b\": [1, null]}'))"
KINDS = {
    "typeWidening": Kind("INT", "'delta.enableTypeWidening' = 'true'", "cast(id AS INT)", widen=True),
    "typeWidening-preview": Kind(
        "INT",
        "'delta.feature.typeWidening-preview' = 'supported', 'delta.enableTypeWidening' = 'true'",
        "cast(id AS INT)",
        widen=True,
    ),
    "variantType": Kind("VARIANT", "", VARIANT),
    "variantType-preview": Kind("VARIANT", "'delta.feature.variantType-preview' = 'supported'", VARIANT),
    "icebergCompatV1": Kind(
        "STRING",
        "'delta.columnMapping.mode' = 'name', 'delta.enableIcebergCompatV1' = 'true'",
        "cast(id AS STRING)",
    ),
    "icebergCompatV2": Kind(
        "STRING",
        "'delta.columnMapping.mode' = 'name', 'delta.enableIcebergCompatV2' = 'true'",
        "cast(id AS STRING)",
    ),
}


def protocol(spark: Any, path: str) -> tuple[Any, ...]:
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    return detail.minReaderVersion, detail.minWriterVersion, sorted(detail.tableFeatures or [])


@pytest.mark.parametrize("feature", list(KINDS))
def test_a_table_with_the_feature_merges_directly_and_certified(
    feature: str, spark: Any, tmp_path: Path
) -> None:
    """(Not in the `warehouse` fixture, whose delta-rs read-back has no variant to compare.)"""
    kind, warehouse = KINDS[feature], tmp_path / "wh"
    path = table_uri(warehouse, "t")
    properties = f" TBLPROPERTIES ({kind.properties})" if kind.properties else ""
    spark.sql(
        f"CREATE TABLE delta.`{path}` (k BIGINT, x {kind.column}, segment_id STRING) USING delta "
        f"PARTITIONED BY (segment_id){properties}"
    )
    segments = []
    for n in range(3):
        if kind.widen and n == 2:  # the last load's values need the wider type
            spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN x TYPE BIGINT")
        when = T0 + timedelta(hours=n)
        segment = Segment(
            f"s{n}", "t", TimeRange(when, when + timedelta(hours=1)), loaded_at=when, records=10
        )
        rows = spark.range(n * 10, n * 10 + 10).selectExpr("id AS k", f"{kind.value} AS x")
        if kind.widen and n == 2:
            rows = rows.withColumn("x", F.col("x").cast("bigint") + F.lit(1 << 40))
        (
            rows.withColumn("segment_id", F.lit(segment.id))
            .write.format("delta")
            .mode("append")
            .option("userMetadata", commit_metadata("load", [segment]))
            .save(path)
        )
        segments.append(segment)
    assert feature in protocol(spark, path)[2]
    assert SparkTableStore(spark, warehouse).commit_path("t") == "direct"
    table = spark.read.format("delta").load(path)
    before, features = spark_fingerprint(table, table.columns), protocol(spark, path)

    commit = execute_merge(
        spark, warehouse, make_plan("t", "minor", segments), MergeSettings(driver_max_bytes=0)
    )

    table = spark.read.format("delta").load(path)
    assert spark_fingerprint(table, table.columns) == before and before.rows == 30
    assert {r.segment_id for r in table.select("segment_id").distinct().collect()} == {commit.outputs[0].id}
    assert protocol(spark, path) == features, "the table's features unchanged"
    log = Path(path.removeprefix("file:")) / "_delta_log" / f"{commit.version:020d}.json"
    info = next(
        json.loads(line)["commitInfo"] for line in log.read_text().splitlines() if "commitInfo" in line
    )
    meta = json.loads(info["userMetadata"])
    assert meta["exact_sizes"], "the direct commit"
    certificate = Certificate.from_dict(meta["certificate"])
    assert certificate.holds and certificate.output == before

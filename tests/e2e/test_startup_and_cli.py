"""Start-up reconciliation with Delta, and the coverage command on a real table."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.cli import main
from compactor.client.loader import load_segment, load_sub_partition, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from tests.helpers.streaming import make_kafka

pytestmark = pytest.mark.integration

DAY = datetime(2024, 5, 1, tzinfo=UTC)


def test_startup_reconciles_the_catalog_with_delta(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    producer = EventProducer(kafka)
    for day in range(2):
        start = DAY + timedelta(days=day)
        load_segment(
            spark,
            warehouse,
            kafka,
            producer,
            "rec",
            sample_rows(spark, start, start + timedelta(days=1), 3),
            start,
            start + timedelta(days=1),
            segment_id=f"k{day}",
        )
    path = table_uri(warehouse, "rec")
    DeltaTable.forPath(spark, path).delete("segment_id = 'k1'")  # someone removed a segment behind our back
    sample_rows(spark, DAY, DAY + timedelta(days=1), 2).withColumn("segment_id", F.lit("stray")).write.format(
        "delta"
    ).mode("append").save(path)  # rows written without the compactor's metadata
    config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]}})
    with caplog.at_level(logging.INFO, logger="compactor"):
        handler = build_handler(spark, config, warehouse, kafka, producer=producer, codec=default_codec())
        assert "segment stray is in Delta but not announced yet" in caplog.text
        handler.keeper.unannounced.grace = timedelta(0)  # its event is still missing after the grace
        assert handler.keeper.unannounced.report(handler.catalog) == [("rec", "stray")]
    assert [s.id for s in handler.catalog.segments("rec")] == ["k0"], (
        "the segment Delta no longer holds is dropped"
    )
    assert "segment k1 is in the catalog but not in Delta; dropped" in caplog.text
    assert "segment stray is in Delta without compactor metadata" in caplog.text


def test_coverage_command_answers_from_the_delta_table(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    config_file = tmp_path / "tables.yaml"
    config_file.write_text(
        "tables:\n  shop:\n    rules: [{rule: auto_merge, levels: [month]}]\n"
        "    sub_partition: {column: region, values: [eu, us]}\n"
    )
    settings = load_config(
        {
            "tables": {
                "shop": {
                    "rules": [{"rule": "auto_merge", "levels": ["month"]}],
                    "sub_partition": {"column": "region", "values": ["eu", "us"]},
                }
            }
        }
    ).for_table("shop")
    rows = sample_rows(spark, DAY, DAY + timedelta(days=1), 3).withColumn("region", F.lit("eu"))
    load_sub_partition(
        spark,
        warehouse,
        kafka,
        EventProducer(kafka),
        settings,
        "shop",
        rows,
        DAY,
        DAY + timedelta(days=1),
        "eu",
        segment_id="s1",
        indexes=["by_day", "by_store"],
    )
    result = CliRunner().invoke(
        main,
        ["coverage", "--table", "shop", "--config", str(config_file), "--warehouse", str(warehouse),
         "--from", "2024-05-01", "--to", "2024-05-03", "--sub-partition", "eu", "--sub-partition", "us",
         "--sub-partition", "asia", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["answering"] == [
        {
            "segment": "s1",
            "start": "2024-05-01T00:00:00+00:00",
            "end": "2024-05-02T00:00:00+00:00",
            "values": ["eu"],
            "indexes": ["by_day", "by_store"],
        }
    ]
    assert answer["not_built"] == [{"segment": "s1", "value": "us"}]
    assert answer["undeclared"] == ["asia"]
    assert answer["undefined_ranges"] == [
        {"start": "2024-05-02T00:00:00+00:00", "end": "2024-05-03T00:00:00+00:00"}
    ]
    assert answer["answered_by"] == "pushdown"
    table = CliRunner().invoke(
        main, ["coverage", "--table", "shop", "--config", str(config_file), "--warehouse", str(warehouse)]
    )
    assert table.stdout.endswith(
        "answered by: indexes by_day, by_store if they can answer, otherwise the pushdown query engine\n"
    ), table.stdout
    able = CliRunner().invoke(
        main, ["coverage", "--table", "shop", "--config", str(config_file), "--warehouse", str(warehouse),
               "--index", "by_store"],
    )  # fmt: skip
    assert "answered by: index by_store (built in every answering segment)" in able.stdout

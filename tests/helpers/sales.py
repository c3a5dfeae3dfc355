"""The sample `sales` table the end-to-end tests load and merge: daily segments, auto_merge rules."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable

from compactor.client.loader import load_segment, sample_rows
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.domain.segments import Segment
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.stream.handler import BatchHandler

TABLE = "sales"


def load_days(
    spark: Any, warehouse: Path, kafka: KafkaSettings, first: datetime, days: int, rows: int = 20
) -> list[Segment]:
    producer = EventProducer(kafka)
    loaded = []
    for i in range(days):
        start = first + timedelta(days=i)
        loaded.append(
            load_segment(
                spark, warehouse, kafka, producer, TABLE,
                sample_rows(spark, start, start + timedelta(days=1), rows, seed=i),
                start, start + timedelta(days=1), segment_id=f"d{start:%Y%m%d}",
            )
        )  # fmt: skip
    return loaded


def handler_for(
    spark: Any, warehouse: Path, kafka: KafkaSettings, levels: list[str], **table_keys: Any
) -> BatchHandler:
    config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": levels}], **table_keys}})
    return build_handler(spark, config, warehouse, kafka)


def merge_versions(spark: Any, warehouse: Path) -> list[int]:
    history = DeltaTable.forPath(spark, table_uri(warehouse, TABLE)).history().collect()
    return sorted(r.version for r in history if r.userMetadata and '"op":"merge"' in r.userMetadata)


def read_table(spark: Any, warehouse: Path, version: int | None = None) -> Any:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(table_uri(warehouse, TABLE))


def create_table(spark: Any, warehouse: Path, properties: dict[str, str]) -> Path:
    """The table as a team would create it before loading, with its own Delta properties."""
    path = Path(table_uri(warehouse, TABLE))
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(
        f"CREATE TABLE delta.`{path}` (event_time TIMESTAMP, customer_id INT, amount DECIMAL(10,2), "
        f"segment_id STRING) USING delta PARTITIONED BY (segment_id) TBLPROPERTIES ({settings})"
    )
    return path

"""Loads of an upsert table of accounts, as the key index's end-to-end tests make them: each a
run of consecutive account ids at one version, written to Delta and announced on Kafka."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from compactor.client.loader import load_segment
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings


@dataclass
class AccountLoads:
    spark: Any
    warehouse: Path
    kafka: KafkaSettings
    producer: EventProducer
    table: str = "accounts"
    start: datetime = datetime(2024, 5, 1, tzinfo=UTC)

    def load(self, n: int, first: int, count: int, version: int) -> str:
        """Load `n` (segment a<n>, hour n): accounts first..first+count-1 at `version`."""
        rows = self.spark.range(first, first + count).select(
            F.col("id").alias("account"), F.lit(version).alias("version"), F.lit(n).alias("load")
        )
        hour, sid = self.start + timedelta(hours=n), f"a{n}"
        load_segment(
            self.spark,
            self.warehouse,
            self.kafka,
            self.producer,
            self.table,
            rows,
            hour,
            hour + timedelta(hours=1),
            segment_id=sid,
        )
        return sid

"""Loads of an upsert table of accounts, as the key index's end-to-end tests make them: each a
run of consecutive account ids at one version, written to Delta and announced on Kafka, and
the job that reads those announcements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from compactor.client.loader import load_segment
from compactor.codec.events import Codec, default_codec
from compactor.config.layout import UpsertConfig
from compactor.config.tables import ProjectConfig
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.stream.handler import BatchHandler
from tests.helpers.streaming import make_kafka

TABLE = "accounts"
UPSERT = {"primary_key": ["account"], "comparison_column": "version"}  # the rows `load` writes


@dataclass
class AccountLoads:
    spark: Any
    warehouse: Path
    kafka: KafkaSettings
    producer: EventProducer
    codec: Codec = field(default_factory=default_codec)
    upsert: UpsertConfig = field(default_factory=lambda: UpsertConfig.model_validate(UPSERT))
    start: datetime = datetime(2024, 5, 1, tzinfo=UTC)

    @classmethod
    def on_new_topics(
        cls, spark: Any, warehouse: Path, bootstrap: str, unique: Callable[[str], str]
    ) -> AccountLoads:
        kafka = make_kafka(bootstrap, unique)
        return cls(spark, warehouse, kafka, EventProducer(kafka))

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
            TABLE,
            rows,
            hour,
            hour + timedelta(hours=1),
            segment_id=sid,
        )
        return sid

    def handler(self, config: ProjectConfig) -> BatchHandler:
        """A job's handler (a new one for each start) on these topics."""
        return build_handler(
            self.spark, config, self.warehouse, self.kafka, producer=self.producer, codec=self.codec
        )

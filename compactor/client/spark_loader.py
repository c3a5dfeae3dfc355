"""`SparkLoader`: segments from Spark DataFrames, each one Delta append and then its event."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Unpack

from pyspark.sql import DataFrame, SparkSession

from compactor.client.announcing import Announcing
from compactor.client.connection import KafkaOptions
from compactor.client.loader import load_segment
from compactor.domain.segments import Segment

log = logging.getLogger(__name__)
TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"


class SparkLoader(Announcing):
    """Loads segments into the tables under `warehouse` and announces each on the segments topic.

    Build it once from plain settings and reuse it for every load: it holds one idempotent
    Kafka producer. Kafka: `bootstrap_servers`, or `kafka_config` (librdkafka keys), and the
    other `KafkaOptions` keywords (`segments_topic`, `encoding`, `schema_registry`). Each `load` commits before it announces, and returns only once Kafka has
    acknowledged the event.

    ```python
    loader = SparkLoader(spark, "s3a://lake/warehouse", bootstrap_servers="kafka:9092")
    segment = loader.load("sales", rows, start, end)
    ```
    """

    def __init__(
        self,
        spark: SparkSession,
        warehouse: Path | str,
        bootstrap_servers: str | None = None,
        **kafka: Unpack[KafkaOptions],
    ) -> None:
        self.spark = spark
        self.warehouse = warehouse
        if spark.conf.get(TIMESTAMP_TYPE, "INT96") == "INT96":  # Spark's default, deprecated
            log.info("setting %s to TIMESTAMP_MICROS, as modern Parquet writers store times", TIMESTAMP_TYPE)
            spark.conf.set(TIMESTAMP_TYPE, "TIMESTAMP_MICROS")
        super().__init__(bootstrap_servers, **kafka)

    def load(
        self,
        table: str,
        rows: DataFrame,
        start: datetime,
        end: datetime,
        *,
        segment_id: str | None = None,
        sub_partitions: Iterable[str] = (),
        indexes: Iterable[str] = (),
    ) -> Segment:
        """Append `rows` to `table` as one segment covering [start, end) and announce it.

        `segment_id` defaults to `<table>-<start>-<random>`; ids are letters, digits, `_`, `-`
        and `.`. Returns the segment as committed, with Delta's row and byte counts."""
        return load_segment(
            self.spark,
            self.warehouse,
            self.connection.kafka,
            self._producer,
            table,
            rows,
            start,
            end,
            segment_id=segment_id,
            sub_partitions=sub_partitions,
            codec=self.connection.codec,
            indexes=indexes,
        )

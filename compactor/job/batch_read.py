"""A micro-batch's events read by the driver: the offsets from Spark's plan, the records from Kafka.

`spark.batch_offsets` finds the ranges Spark planned for the batch; `kafka.range_reader` fetches
them with the driver's own client. When either cannot (a plan of another shape, the broker
refusing the driver's read), the batch is read through Spark as before, and the job says why:
the first time, then every `WARN_EVERY`th time, so that a lasting cause does not flood the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from compactor.errors import RangeNotRead
from compactor.kafka.range_reader import RangeReader
from compactor.kafka.settings import KafkaSettings
from compactor.spark.batch_offsets import kafka_ranges
from compactor.stream.handler import spark_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

WARN_EVERY = 100


class DriverRead:
    """The handler's `read_batch` on the Spark path (`operations.driver_batch_reads`)."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._reader = RangeReader(kafka)
        self.driver_reads = 0
        self.spark_reads = 0  # batches the driver could not read

    def __call__(self, batch: DataFrame) -> tuple[Sequence[Any], str]:
        ranges = kafka_ranges(batch)
        if ranges is None:
            return self._through_spark(batch, "its plan is not a plain read of Spark's Kafka source")
        try:
            records = self._reader.read(ranges)
        except RangeNotRead as exc:
            return self._through_spark(batch, str(exc))
        self.driver_reads += 1
        return records, "driver"

    def _through_spark(self, batch: DataFrame, why: str) -> tuple[Sequence[Any], str]:
        if self.spark_reads % WARN_EVERY == 0:
            log.warning(
                "a micro-batch read through Spark (%d so far, %d by the driver): %s",
                self.spark_reads + 1,
                self.driver_reads,
                why,
            )
        self.spark_reads += 1
        return spark_rows(batch), "spark"

    def close(self) -> None:
        self._reader.close()

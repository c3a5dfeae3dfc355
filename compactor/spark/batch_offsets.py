"""The Kafka offsets a `foreachBatch` micro-batch holds, read from its plan without running it.

A micro-batch's rows are a Spark job away (`collect`): tasks that fetch a few records through the
executors' Kafka consumers, about 100 ms however small the batch, nearly all the time a one-event
batch costs. The ranges Spark planned for the batch are already on the driver, in the input
partitions of the RDD under the batch's DataFrame; with them, the driver reads the same records
with its own Kafka client in a few milliseconds. Spark still owns the offsets (it records the
batch's end once the function returns), so a replay reads the same ranges again.

This walks Spark's internal classes (`DataSourceRDD`, the Kafka source's `KafkaBatchInputPartition`);
anything it does not recognise gives None, and the caller collects the rows through Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compactor.domain.offsets import OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROOT_RDD = "DataSourceRDD"
KAFKA_PARTITION = "KafkaBatchInputPartition"


def kafka_ranges(batch: DataFrame) -> list[OffsetRange] | None:
    """The ranges the batch reads, in Spark's partition order (empty ranges are not planned), or
    None when the batch is not a plain read of Spark's Kafka source."""
    try:
        leaves = batch._jdf.queryExecution().logical().collectLeaves()
        if leaves.size() != 1:
            return None
        rdd = _root(leaves.apply(0).rdd())
        if rdd is None:
            return None
        return [_range(part) for part in rdd.partitions()]
    except Exception:  # a plan of another shape, another Spark: Py4J says so by raising
        return None


def _root(rdd: Any) -> Any:
    """The RDD the batch's chain starts from, when it is a data source's scan and the chain is one
    line (a join or union would mix sources)."""
    while rdd.dependencies().size() == 1:
        rdd = rdd.dependencies().apply(0).rdd()
    if rdd.dependencies().size() != 0 or rdd.getClass().getSimpleName() != ROOT_RDD:
        return None
    return rdd


def _range(part: Any) -> OffsetRange:
    source = part.inputPartition().get()
    if source.getClass().getSimpleName() != KAFKA_PARTITION:
        raise TypeError(f"not a Kafka partition: {source.getClass().getName()}")
    offsets = source.offsetRange()
    topic_partition = offsets.topicPartition()
    return OffsetRange(
        str(topic_partition.topic()),
        int(topic_partition.partition()),
        int(offsets.fromOffset()),
        int(offsets.untilOffset()),
    )

"""`StreamingSink`: a Structured Streaming producer's micro-batches, each one segment, exactly once.

`df.writeStream.foreachBatch(StreamingSink(loader, "events", time_column="ts")).start()`

Spark may run a micro-batch again after a failure (the batch's offsets were
not checkpointed yet). The segment id is derived from the query id, which a
query keeps across restarts from its checkpoint, and the batch id, and the Delta
append carries that pair as its transaction (`txnAppId`, `txnVersion`), so a
replayed batch writes nothing. Its event is produced again, from the first
commit's record: the same segment, which the job takes as a duplicate.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from compactor.client.spark_loader import SparkLoader
from compactor.delta.files import HadoopFiles
from compactor.delta.log.reader import DeltaLogReader
from compactor.delta.log.reads import read_catalog, table_exists
from compactor.delta.paths import table_uri
from compactor.delta.table_ops.writes import write_segment
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange, validate_segment_id, validate_table_name
from compactor.errors import CompactorError

QUERY_ID = "sql.streaming.queryId"  # the local property Spark sets on a micro-batch's thread
TXN_PREFIX = "compactor-sink-"
ONE_MICROSECOND = timedelta(microseconds=1)
RECENT_LOOK = 8  # commits read before each batch: a replayed batch is usually among them


class StreamingSink:
    """The `foreachBatch` function of a streaming producer: each non-empty micro-batch is
    appended to `table` as one segment and announced; empty batches write nothing.

    The segment covers the batch's `time_column` values (its earliest to just past its latest);
    without one, the moment the batch was processed. Ids are `<table>-<query id>-<batch id>`.
    """

    def __init__(self, loader: SparkLoader, table: str, *, time_column: str | None = None) -> None:
        self.loader = loader
        self.table = validate_table_name(table)
        self.time_column = time_column

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        query_id = spark.sparkContext.getLocalProperty(QUERY_ID)
        if not query_id:
            raise CompactorError("StreamingSink runs as a streaming query's foreachBatch function")
        segment_id = validate_segment_id(f"{self.table}-{query_id.replace('-', '')[:16]}-{batch_id}")
        earlier = self._committed(segment_id)
        if earlier is None:
            batch = batch.persist()
            try:
                earlier = self._write(batch, segment_id, (TXN_PREFIX + query_id, batch_id))
            finally:
                batch.unpersist()
        if earlier is not None:
            self.loader.announce(SegmentCompleted(earlier, now_utc()))

    def _write(self, batch: DataFrame, segment_id: str, txn: tuple[str, int]) -> Segment | None:
        if batch.isEmpty():
            return None
        segment = Segment(segment_id, self.table, self._range(batch), loaded_at=now_utc())
        spark, warehouse = self.loader.spark, self.loader.warehouse
        try:  # the commit's record: ours, or (Delta found the transaction done) the first run's
            return write_segment(spark, warehouse, segment, batch, txn)
        except CompactorError:  # that first run is older than the newest commits: the history
            committed = read_catalog(spark, warehouse, self.table).get(self.table, segment_id)
            if committed is None:
                raise
            return committed

    def _range(self, batch: DataFrame) -> TimeRange:
        if self.time_column is None:
            now = now_utc()
            return TimeRange(now, now + ONE_MICROSECOND)
        if self.time_column not in batch.columns:
            raise CompactorError(f"time_column {self.time_column!r}: the batch has no such column")
        row = batch.agg(
            F.min(F.unix_micros(F.col(self.time_column))).alias("first"),
            F.max(F.unix_micros(F.col(self.time_column))).alias("last"),
        ).first()
        if row is None or row.first is None:
            raise CompactorError(f"time_column {self.time_column!r}: every value in the batch is null")
        return TimeRange(_instant(row.first), _instant(row.last) + ONE_MICROSECOND)

    def _committed(self, segment_id: str) -> Segment | None:
        """The segment as one of the table's newest commits recorded it (None: not among them;
        an older one is found by the write, which Delta's transaction makes a no-op)."""
        spark, warehouse = self.loader.spark, self.loader.warehouse
        if not table_exists(spark, warehouse, self.table):
            return None
        log = DeltaLogReader(HadoopFiles(spark), table_uri(warehouse, self.table), self.table)
        found = log.find(f'"id":"{segment_id}"', RECENT_LOOK)
        return next((s for s in found.added if s.id == segment_id), None) if found else None


def _instant(micros: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)

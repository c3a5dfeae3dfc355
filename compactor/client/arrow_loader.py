"""`ArrowLoader`: segments from Arrow tables or pandas DataFrames, with no JVM (delta-rs).

A Python service that has no Spark loads through delta-rs (`pip install
'streaming-compactor[deltars]'`). The load is the same as the Spark loader's:
the same segment id rules, one Delta append partitioned by `segment_id` whose
`userMetadata` is the load record the job reads (so the job takes it as one of
its own commits, not as rows "written by others" to check), the event produced
only after the commit. A transaction id per segment (`txn`: the `compactor-load-<id>`
application) makes a retried load with the same `segment_id` announce the first
commit instead of writing the rows again.

Those ids expire: each carries its commit's time, and the loader gives the tables it
loads `LOADER_TXN_RETENTION` (when it creates one, and once on a table it finds without
a retention of its own); Delta and delta-rs drop older ids when they rebuild the table's
state, so a table's checkpoints hold a retention's worth of loads, not every load ever.
A retry later than that writes the rows again.

The loader keeps the tables it loaded open (the most recent `TABLES_KEPT`) and brings each up to
date before a load by reading only the commits since: a table's state is read once, not four
times per load from its last checkpoint. In `bench/years.py` a load took 0.22 s at first and
1.06 s after an hour as the logs grew, and the loaders' CPU was taken from the job beside them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from compactor.client.announcing import Announcing
from compactor.client.connection import KafkaOptions
from compactor.delta.log.commit_metadata import commit_metadata, parse_metadata
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.table_ops.properties import LOADER_TXN_RETENTION, TXN_RETENTION_PROPERTY
from compactor.domain.clock import now_utc
from compactor.domain.events import SegmentCompleted
from compactor.domain.segment_json import segment_from_dict
from compactor.domain.segments import Segment, TimeRange, new_segment_id, validate_segment_id
from compactor.errors import CompactorError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

TXN_PREFIX = "compactor-load-"
# tables a loader keeps open between loads, the least recently loaded let go: each holds its
# table's live files and their statistics in memory (delta-rs)
TABLES_KEPT = 64


class ArrowLoader(Announcing):
    """Loads segments into the tables under `warehouse` through delta-rs and announces each.

    ```python
    loader = ArrowLoader("/data/warehouse", bootstrap_servers="kafka:9092")
    segment = loader.load("sales", pandas_frame, start, end)
    ```

    `storage_options` go to delta-rs (object store credentials and endpoints; `s3a://`
    warehouses are opened as `s3://`). Kafka settings as for `SparkLoader`.
    """

    def __init__(
        self,
        warehouse: Path | str,
        bootstrap_servers: str | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        **kafka: Unpack[KafkaOptions],
    ) -> None:
        try:
            import deltalake  # noqa: F401
        except ImportError:
            raise CompactorError(
                "ArrowLoader needs delta-rs: pip install 'streaming-compactor[deltars]'"
            ) from None
        self.warehouse = warehouse
        self.storage_options = dict(storage_options or {})
        self._retained: set[str] = set()  # tables seen with a transaction retention
        # tables open between loads (delta-rs `DeltaTable`s), taken out while a load uses one:
        # two loads of one table at once (threads sharing the loader) each have their own
        self._idle: OrderedDict[str, Any] = OrderedDict()
        self._idle_lock = threading.Lock()
        super().__init__(bootstrap_servers, **kafka)

    def load(
        self, table: str, data: Any, start: datetime, end: datetime, *, segment_id: str | None = None
    ) -> Segment:
        """Append `data` (a pyarrow Table or RecordBatch, or a pandas DataFrame) to `table` as one
        segment covering [start, end), then announce it. Returns the segment as committed."""
        time_range = TimeRange(start, end)
        rows = _arrow(data)
        if SEGMENT_COLUMN in rows.column_names:
            raise CompactorError(f"column {SEGMENT_COLUMN!r}: the loader sets it; leave it out of the rows")
        segment = Segment(
            id=validate_segment_id(segment_id or new_segment_id(table, time_range.start)),
            table=table,
            range=time_range,
            loaded_at=now_utc(),
            records=rows.num_rows,
        )
        uri = _rust_uri(table_uri(self.warehouse, table))
        existing = self._take(uri)
        committed = self._committed(existing, segment.id) if existing is not None else None
        if committed is None:
            existing, committed = self._write(uri, existing, segment, rows)
        self._put_back(uri, existing)  # not after a failure: a table in an unknown state is reopened
        self.announce(SegmentCompleted(committed, now_utc()))
        return committed

    def close(self) -> None:
        with self._idle_lock:
            self._idle.clear()
        super().close()

    def _take(self, uri: str) -> Any | None:
        """The table as of its newest commit (None: not created yet): the one kept open, brought
        up to date with the commits since, or opened afresh."""
        with self._idle_lock:
            table = self._idle.pop(uri, None)
        if table is not None:
            try:
                table.update_incremental()
                return table
            except Exception as exc:  # replaced or unreadable: a fresh open says which
                log.info("table %s: bringing it up to date failed (%s); opened again", uri, exc)
        return _open(uri, self.storage_options)

    def _put_back(self, uri: str, table: Any) -> None:
        with self._idle_lock:
            self._idle[uri] = table
            self._idle.move_to_end(uri)
            while len(self._idle) > TABLES_KEPT:
                self._idle.popitem(last=False)

    def _write(self, uri: str, existing: Any | None, segment: Segment, rows: pa.Table) -> tuple[Any, Segment]:
        """Append the segment's rows; the table after the commit (delta-rs moves an open table to
        the version its write committed), and the segment with its bytes."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        if existing is not None:
            rows = _conform(rows, existing)
            self._retain(uri, existing)
        rows = rows.append_column(SEGMENT_COLUMN, _repeat(segment.id, rows.num_rows))
        write_deltalake(
            uri if existing is None else existing,
            rows,
            mode="append",
            partition_by=[SEGMENT_COLUMN] if existing is None else None,
            # a new table's properties (delta-rs applies them only when it creates the table)
            configuration={TXN_RETENTION_PROPERTY: LOADER_TXN_RETENTION} if existing is None else None,
            storage_options=self.storage_options or None,
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": commit_metadata("load", [segment])},
                # the time lets the id expire with the retention (Delta drops one without it at once)
                app_transactions=[Transaction(TXN_PREFIX + segment.id, 0, _now_ms())],
            ),
        )
        written = existing if existing is not None else _open(uri, self.storage_options)
        if written is None:
            raise CompactorError(f"table {uri}: the load committed, but the table cannot be opened")
        return written, replace(segment, bytes=_segment_bytes(written, segment.id))

    def _retain(self, uri: str, table: Any) -> None:
        """Give a table without a transaction retention the loaders' (one metadata commit, once;
        a table that has one, the user's or ours, is left alone). A commit lost to another
        writer is tried again at the next load."""
        if uri in self._retained:
            return
        if TXN_RETENTION_PROPERTY not in table.metadata().configuration:
            try:
                table.alter.set_table_properties({TXN_RETENTION_PROPERTY: LOADER_TXN_RETENTION})
            except Exception as exc:  # a concurrent commit won: the load goes on
                log.info(
                    "table %s: setting %s failed (%s); tried again later", uri, TXN_RETENTION_PROPERTY, exc
                )
                return
            log.info(
                "table %s: %s set to %s, so that the loads' transaction ids expire",
                uri,
                TXN_RETENTION_PROPERTY,
                LOADER_TXN_RETENTION,
            )
        self._retained.add(uri)

    def _committed(self, table: Any, segment_id: str) -> Segment | None:
        """The segment as an earlier load of the same id committed it (None: never loaded)."""
        if table.transaction_version(TXN_PREFIX + segment_id) is None:
            return None
        for commit in table.history():
            meta = parse_metadata(commit.get("userMetadata"))
            added = [s for s in (meta or {}).get("added", []) if s.get("id") == segment_id]
            if added and meta and meta.get("op") == "load":
                return replace(segment_from_dict(added[0]), bytes=_segment_bytes(table, segment_id))
        raise CompactorError(
            f"segment {segment_id}: its load committed, but the table's history lost its record"
        )


def _arrow(data: Any) -> pa.Table:
    import pyarrow as pa

    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    raise CompactorError(
        f"rows: a pyarrow Table or RecordBatch or a pandas DataFrame, not {type(data).__name__}"
    )


def _conform(rows: pa.Table, table: Any) -> pa.Table:
    """The rows cast to the table's column types (pandas' int64 to Spark's INT, naive or
    nanosecond times to Delta's microsecond UTC timestamps); a value that does not fit fails."""
    import pyarrow as pa

    target = pa.schema(table.schema().to_arrow())
    columns = []
    for name in rows.column_names:
        column = rows.column(name)
        if name in target.names and column.type != target.field(name).type:
            try:
                column = column.cast(target.field(name).type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise CompactorError(
                    f"column {name!r}: {column.type} does not fit the table's {target.field(name).type}: {exc}"
                ) from None
        columns.append(column)
    return pa.table(columns, names=rows.column_names)


def _repeat(value: str, count: int) -> pa.Array:
    import pyarrow as pa

    return pa.array([value] * count, pa.string())


def _open(uri: str, options: Mapping[str, str]) -> Any:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(uri, storage_options=dict(options) or None)
    except TableNotFoundError:
        return None


def _segment_bytes(table: Any, segment_id: str) -> int:
    """Bytes of the segment's files in the table's newest version."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    partition = actions.column(f"partition.{SEGMENT_COLUMN}").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    return sum(size for sid, size in zip(partition, sizes, strict=True) if sid == segment_id)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _rust_uri(uri: str) -> str:
    """delta-rs names S3 `s3://`; Hadoop's `s3a://` is the same bucket."""
    return "s3://" + uri.removeprefix("s3a://") if uri.startswith("s3a://") else uri

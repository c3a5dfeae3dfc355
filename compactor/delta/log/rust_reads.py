"""Reading a small Delta table of ours without Spark: through delta-rs, where it can.

Spark's first query in a fresh driver is cold (several seconds); the catalog's
current part is read at every start, before the stream's query exists. delta-rs
reads it in a fraction of that, on a local disk, when the `deltars` extra is
installed and no reader feature (deletion vectors, column mapping) guards the
table. Anything else is left to Spark.

The same holds for a table's files per segment and its properties, which start-up
reads for every table it has not seen before: through Spark that is a snapshot (its
state cached in the driver) and a query per table, most of a second each.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Row

log = logging.getLogger(__name__)


def partition_rows(local_path: str, column: str, value: str) -> list[Any] | None:
    """The rows of one partition as Spark `Row`s, or None when delta-rs cannot read them."""
    table = _open(local_path)
    if table is None:
        return None
    try:
        part = table.to_pyarrow_table(filters=[(column, "=", value)])
    except Exception as exc:  # what it cannot read, Spark can
        _cannot(local_path, exc)
        return None
    return [Row(**r) for r in part.to_pylist()]


def file_totals(local_path: str, column: str) -> dict[str, tuple[int, int, int]] | None:
    """(rows, rows deletion vectors hide, bytes) per value of the partition `column` holding rows,
    from the snapshot's add actions, as `reads.segment_rows` counts them through Spark (rows -1
    where no file has statistics); None when delta-rs cannot tell. Without reader features
    there are no deletion vectors: nothing is hidden."""
    table = _open(local_path)
    if table is None:
        return None
    try:
        import pyarrow as pa

        adds = pa.table(table.get_add_actions(flatten=True)).to_pydict()
        values, records, sizes = adds[f"partition.{column}"], adds["num_records"], adds["size_bytes"]
    except Exception as exc:
        _cannot(local_path, exc)
        return None
    rows: dict[str, int | None] = {}  # as Spark's sum: files without statistics count as nothing
    size: dict[str, int] = {}
    for value, n, file_bytes in zip(values, records, sizes, strict=True):
        known = rows.get(value)
        rows[value] = known if n is None else (known or 0) + n
        size[value] = size.get(value, 0) + file_bytes
    return {v: (-1 if n is None else n, 0, size[v]) for v, n in rows.items() if n is None or n > 0}


def table_properties(local_path: str) -> dict[str, str] | None:
    """The table's properties (its metadata's configuration), or None when delta-rs cannot tell."""
    table = _open(local_path)
    if table is None:
        return None
    try:
        return dict(table.metadata().configuration)
    except Exception as exc:
        _cannot(local_path, exc)
        return None


def _open(local_path: str) -> Any | None:
    """The table in delta-rs, or None (not installed, unreadable, or a reader feature)."""
    try:
        from deltalake import DeltaTable
    except ImportError:
        return None
    try:
        table = DeltaTable(local_path)
    except Exception as exc:
        _cannot(local_path, exc)
        return None
    return table if table.protocol().min_reader_version == 1 else None  # Spark knows every feature


def _cannot(local_path: str, exc: Exception) -> None:
    log.info("delta-rs cannot read %s (%s: %s); Spark will", local_path, type(exc).__name__, exc)

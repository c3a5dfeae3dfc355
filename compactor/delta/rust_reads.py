"""Reading a small Delta table of ours without Spark: through delta-rs, where it can.

Spark's first query in a fresh driver is cold (several seconds); the catalog's
current part is read at every start, before the stream's query exists. delta-rs
reads it in a fraction of that, on a local disk, when the `deltars` extra is
installed and no reader feature (deletion vectors, column mapping) guards the
table. Anything else is left to Spark.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Row

log = logging.getLogger(__name__)


def partition_rows(local_path: str, column: str, value: str) -> list[Any] | None:
    """The rows of one partition as Spark `Row`s, or None when delta-rs cannot read them."""
    try:
        from deltalake import DeltaTable
    except ImportError:
        return None
    try:
        table = DeltaTable(local_path)
        if table.protocol().min_reader_version != 1:  # a reader feature: Spark knows them all
            return None
        part = table.to_pyarrow_table(filters=[(column, "=", value)])
    except Exception as exc:  # what it cannot read, Spark can
        log.info("delta-rs cannot read %s (%s: %s); Spark will", local_path, type(exc).__name__, exc)
        return None
    return [Row(**r) for r in part.to_pylist()]

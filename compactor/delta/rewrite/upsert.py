"""Reading upsert tables: the latest row per primary key, and invalid-row counts.

The valid row of a key is the one with the highest comparison value; ties go
to the later load, then to the higher row hash, so every reader and the
compactor agree on one winner per key. The load order is not a column of the
rows (producers write upsert tables with their own writers): it is each
segment's load time as the catalog knows it, joined on `segment_id`. A
segment the catalog does not know yet was loaded after everything it knows,
so it orders as the newest. A merge output carries the latest load time of
its inputs, which keeps every tie decided as before the merge.

`latest_rows` and `view_sql` give readers the same answer from plain SQL over
the table and the catalog store; the compactor itself passes the load times
it holds in memory.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from compactor.catalog.key_index import KeyColumns, KeyRow
from compactor.catalog.key_values import Ints
from compactor.config.layout import UpsertConfig
from compactor.delta.log.reads import segment_rows
from compactor.delta.paths import SEGMENT_COLUMN, delta_table_sql, sql_string, state_uri, table_uri
from compactor.delta.rewrite.key_columns import key_columns

LOADED = "__loaded_at"  # the load time joined onto each row, never written
_RANK = "__upsert_rank"
LoadOrder = Mapping[str, datetime]  # segment id -> when it was loaded


def _winner_order(data_columns: Sequence[str], upsert: UpsertConfig) -> list[Column]:
    return [
        F.col(upsert.comparison_column).desc(),
        F.col(LOADED).desc_nulls_first(),  # not in the catalog yet: loaded after all it knows
        F.xxhash64(*data_columns).desc(),
    ]


# the column metadata Delta tags a row tracking column with (`RowTracking.preserveRowTrackingColumns`)
_ROW_TRACKING_TAGS = ("__row_id_metadata_col", "__row_commit_version_metadata_col")


def _data_columns(df: DataFrame) -> list[str]:
    """The row's own columns: neither its segment nor what ranking adds, nor the row id and
    commit version a rewrite carries (a row's hash is the same read by the compactor or a reader)."""
    return [
        f.name
        for f in df.schema.fields
        if f.name not in (SEGMENT_COLUMN, LOADED, _RANK)
        and not any(f.metadata.get(t) for t in _ROW_TRACKING_TAGS)
    ]


def index_row_hash(df: DataFrame) -> Column:
    """A row's hash as the key index keeps it and ties are broken by: its data columns'."""
    return F.xxhash64(*_data_columns(df))


def with_validity(df: DataFrame, upsert: UpsertConfig, order: DataFrame) -> DataFrame:
    """`df` plus a boolean column `valid`: is this row its key's latest version?

    `order` has one row per segment: `segment_id` and its load time `__loaded_at`. Row tracking
    columns `df` carries go with their rows: the winner keeps its own row id and commit version.
    """
    data = _data_columns(df)
    joined = df.join(F.broadcast(order), SEGMENT_COLUMN, "left")
    window = Window.partitionBy(*upsert.primary_key).orderBy(*_winner_order(data, upsert))
    ranked = joined.withColumn(_RANK, F.row_number().over(window))
    return ranked.withColumn("valid", F.col(_RANK) == 1).drop(_RANK, LOADED)


def order_frame(spark: SparkSession, load_order: LoadOrder) -> DataFrame:
    """The load times the compactor holds, as the frame `with_validity` joins."""
    rows = [(sid, when) for sid, when in load_order.items()]
    return spark.createDataFrame(rows, f"{SEGMENT_COLUMN} string, {LOADED} timestamp")


def invalid_counts(
    spark: SparkSession, warehouse: Path | str, table: str, upsert: UpsertConfig, load_order: LoadOrder
) -> dict[str, int]:
    """Invalid (superseded) rows per segment id, from one scan of the current snapshot."""
    df = DeltaTable.forPath(spark, table_uri(warehouse, table)).toDF()
    judged = with_validity(df, upsert, order_frame(spark, load_order))
    rows = judged.where(~F.col("valid")).groupBy(SEGMENT_COLUMN).count().collect()
    return {r[SEGMENT_COLUMN]: int(r["count"]) for r in rows}


ROWS_PER_READ = 1_000_000  # a read of the key rows brings at most about this many to the driver


def key_rows(
    spark: SparkSession,
    warehouse: Path | str,
    table: str,
    upsert: UpsertConfig,
    segment_ids: Collection[str] | None,
) -> Iterator[KeyRow | KeyColumns]:
    """What the key index reads of `segment_ids`' rows: key hash, comparison value, row hash
    (the one `with_validity` breaks ties with) and segment; None reads every row. Lazily, a
    few segments at a time (about `ROWS_PER_READ` rows, by the snapshot's row counts), each
    read through Arrow: the driver never holds a whole table's keys at once (at 10M keys one
    read of the whole table lost its task results in a 1 GiB driver)."""
    # grouping needs the snapshot's counts only for more than one segment: a load's own read
    # (the hot path) does without them
    counts = segment_rows(spark, warehouse, table) if segment_ids is None or len(segment_ids) > 1 else {}
    wanted = sorted(counts) if segment_ids is None else sorted(segment_ids)
    group: list[str] = []
    rows = 0
    for sid in wanted:
        group.append(sid)
        rows += max(counts[sid].visible, 0) if sid in counts else 0
        if rows >= ROWS_PER_READ:
            yield from _key_rows_of(spark, warehouse, table, upsert, group)
            group, rows = [], 0
    if group:
        yield from _key_rows_of(spark, warehouse, table, upsert, group)


def _key_rows_of(
    spark: SparkSession, warehouse: Path | str, table: str, upsert: UpsertConfig, segment_ids: list[str]
) -> list[KeyRow | KeyColumns]:
    df = DeltaTable.forPath(spark, table_uri(warehouse, table)).toDF()
    return _as_key_rows(_key_columns(df, upsert).where(F.col(SEGMENT_COLUMN).isin(segment_ids)))


def key_rows_of_keys(
    spark: SparkSession,
    warehouse: Path | str,
    table: str,
    upsert: UpsertConfig,
    keys: Ints,
    excluding: Collection[str],
) -> Iterator[KeyRow | KeyColumns]:
    """The rows whose key hash is one of `keys`, outside the segments `excluding`: what the key
    index reads again of the rest of a table after a change it could not follow. Each read
    scans the key columns of the whole table on the executors and brings only those keys' rows
    to the driver, `ROWS_PER_READ` keys at a time (broadcast to the join)."""
    df = DeltaTable.forPath(spark, table_uri(warehouse, table)).toDF()
    columns = _key_columns(df, upsert)
    if excluding:
        columns = columns.where(~F.col(SEGMENT_COLUMN).isin(sorted(excluding)))
    wanted = np.unique(keys)
    for start in range(0, len(wanted), ROWS_PER_READ):
        some = spark.createDataFrame(pa.table({"key": wanted[start : start + ROWS_PER_READ]}))
        yield from _as_key_rows(columns.join(F.broadcast(some), "key"))


def _key_columns(df: DataFrame, upsert: UpsertConfig) -> DataFrame:
    return df.select(
        F.xxhash64(*upsert.primary_key).alias("key"),
        F.col(upsert.comparison_column).alias("value"),
        index_row_hash(df).alias("row_hash"),
        F.col(SEGMENT_COLUMN),
    )


def _as_key_rows(columns: DataFrame) -> list[KeyRow | KeyColumns]:
    return key_columns(columns.select("key", "value", "row_hash", SEGMENT_COLUMN).toArrow())


def valid_rows_of(df: DataFrame, segment_ids: list[str], upsert: UpsertConfig, order: DataFrame) -> DataFrame:
    """The valid rows of `segment_ids`, judged against every row of `df` (the whole table).

    Safe under concurrent upserts: a row superseded now stays superseded, since
    newer versions are only ever added and a key's latest row is never removed.
    """
    judged = with_validity(df, upsert, order)
    return judged.where(F.col(SEGMENT_COLUMN).isin(segment_ids) & F.col("valid")).drop("valid")


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def view_sql(spark: SparkSession, warehouse: Path | str, table: str, upsert: UpsertConfig) -> str:
    """A SELECT returning the latest row per key, for readers who never import this package.

    It reads the table and the catalog store (for the load times), ranks as
    `with_validity` does, and returns the table's columns. The store's journal
    (its last few minutes of saves, see `catalog_table`) is not read: a segment
    loaded since then ranks as the newest, and two such segments holding the same
    key with the same comparison value are told apart by their row hash. The column list is
    the table's schema now: re-create a view built from it after a schema change.
    """
    data_uri, catalog_uri = table_uri(warehouse, table), state_uri(warehouse, "catalog")
    columns = DeltaTable.forPath(spark, data_uri).toDF().columns
    if not DeltaTable.isDeltaTable(spark, catalog_uri):  # the job has not run yet: no load is known
        loads = "SELECT CAST(NULL AS STRING) AS segment_id, CAST(NULL AS TIMESTAMP) AS loaded_at WHERE false"
    else:
        loads = _loads_sql(catalog_uri, table)
    data = ", ".join(_quoted(c) for c in columns if c != SEGMENT_COLUMN)
    keys = ", ".join(_quoted(k) for k in upsert.primary_key)
    return f"""SELECT {", ".join(_quoted(c) for c in columns)} FROM (
  SELECT d.*, ROW_NUMBER() OVER (
    PARTITION BY {keys}
    ORDER BY d.{_quoted(upsert.comparison_column)} DESC, o.loaded_at DESC NULLS FIRST, xxhash64({data}) DESC
  ) AS rank
  FROM {delta_table_sql(data_uri)} AS d
  LEFT JOIN ({loads}) AS o ON d.segment_id = o.segment_id
) WHERE rank = 1"""


def _loads_sql(catalog_uri: str, table: str) -> str:
    """Each live segment's load time, from the catalog store (its rows fold latest-wins)."""
    return f"""
    SELECT segment_id, CAST(get_json_object(segment, '$.loaded_at') AS TIMESTAMP) AS loaded_at
    FROM (
      SELECT segment_id, segment, live,
             ROW_NUMBER() OVER (PARTITION BY segment_id ORDER BY seq DESC) AS latest
      FROM {delta_table_sql(catalog_uri)}
      WHERE part = 'current' AND `table` = {sql_string(table)} AND segment_id <> ''
    ) WHERE latest = 1 AND live"""


def latest_rows(spark: SparkSession, warehouse: Path | str, table: str, upsert: UpsertConfig) -> DataFrame:
    """The table as readers of an upsert table should see it: one row, the latest, per key."""
    return spark.sql(view_sql(spark, warehouse, table, upsert))

"""Small merges written by the driver: the inputs' rows read and written with Arrow, no Spark job.

A merge of a few small segments costs Spark far more than its data: a job to plan, serialise,
schedule and run, its code generated, its file index filtered through a local query. Below a size
bound (`operations.driver_merge_max_bytes`) the driver reads the inputs' Parquet files with Arrow,
writes the output file itself, and commits it in the same Delta transaction as any merge (the
job's JVM, `LogStore` and conflict checks are unchanged).

The file is what Spark would write, as Delta readers see it: the table's columns in its schema's
types (timestamps as microseconds, decimals as integers), the inputs' compression codec,
dictionary encoding, and Parquet statistics. Its Delta statistics are the inputs' merged: rows
summed, each column's minimum the least of the inputs' minimums, its maximum the greatest, its
null count summed. A merge moves rows without changing one, so those are the statistics of its
rows, in the inputs' own format (what Spark wrote for them, Spark's).

With row tracking, each row's stable id and commit version are written as Spark's writer stores
them for OPTIMIZE: in the materialised columns the table's configuration names, after the table's
data columns. A row's id is its input file's materialised id, or where that is null (or the column
absent) the file's `baseRowId` plus the row's position in the file; its commit version likewise
falls back to the file's `defaultRowCommitVersion` (PROTOCOL.md, "Row Tracking"). The commit gives
the new file its own `baseRowId` and `defaultRowCommitVersion`. Identity columns are copied as any
column is: the values stay, the table's high-water mark is not touched.

Only plain merges of inputs this path reads exactly take it: no deletion vectors, statistics with
tight bounds on every file, a flat schema of primitive types, no column mapping, rows laid out as
read or by a linear sort, and with row tracking, files that carry their base row id and default
commit version. Anything else is written by Spark (`refusal` says why).
"""

from __future__ import annotations

import io
import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compactor.config.sort import SortConfig
from compactor.delta.commit.footer_stats import stats_json
from compactor.delta.content.fingerprint import arrow_fingerprint, table_columns
from compactor.delta.features import (
    PLAIN_FILE_FEATURES,
    features,
    row_tracking_columns,
    table_config,
    table_flag,
)
from compactor.delta.files import HadoopFiles
from compactor.delta.log.live_files import LiveFile
from compactor.delta.paths import SEGMENT_COLUMN
from compactor.domain.certificate import Certificate, total

DRIVER_MERGE_MAX_BYTES = 16 << 20
_SAFE_ID = re.compile(r"[A-Za-z0-9_.\-]+")
_CODECS = {
    "none": "none",
    "uncompressed": "none",
    "snappy": "snappy",
    "zstd": "zstd",
    "gzip": "gzip",
    "lz4": "lz4",
}

# Delta schema type -> the Arrow type its rows are written in (Spark's Parquet types).
_ARROW: dict[str, Callable[[], pa.DataType]] = {
    "byte": pa.int8,
    "short": pa.int16,
    "integer": pa.int32,
    "long": pa.int64,
    "float": pa.float32,
    "double": pa.float64,
    "string": pa.string,
    "binary": pa.binary,
    "boolean": pa.bool_,
    "date": pa.date32,
    "timestamp": lambda: pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": lambda: pa.timestamp("us"),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def refusal(
    protocol: dict[str, Any],
    metadata: dict[str, Any],
    inputs: Sequence[LiveFile],
    output_id: str,
    order: SortConfig | None,
    max_bytes: int,
) -> str | None:
    """Why this merge is written by Spark rather than the driver; None when the driver may."""
    if not inputs:
        return "no input file (every input is empty)"
    size = sum(f.size for f in inputs)
    config = table_config(metadata)
    if max_bytes <= 0 or size > max_bytes:
        return f"{size} bytes of input, over the driver's {max_bytes}"
    if features(protocol) - PLAIN_FILE_FEATURES:
        return f"table features {sorted(features(protocol) - PLAIN_FILE_FEATURES)}"
    if config.get("delta.columnmapping.mode", "none").lower() != "none" or table_flag(
        config, "delta.randomizefileprefixes"
    ):
        return "column mapping or randomized file prefixes"
    if order is not None and order.curve != "linear":
        return f"a {order.curve} layout"
    if not _SAFE_ID.fullmatch(output_id):
        return f"output id {output_id!r} needs escaping in a path"
    if _arrow_schema(metadata) is None:
        return "a column of a nested or unknown type"
    tracking = row_tracking_columns(protocol, metadata)
    if tracking is not None and not all(tracking):
        return "row tracking without the materialised columns' names"
    for f in inputs:
        add = f.add
        stats = json.loads(add.get("stats") or "{}")
        if f.vector or "%" in f.path or "numRecords" not in stats or stats.get("tightBounds") is False:
            return f"input file {f.path}: a deletion vector, an escaped path or no exact statistics"
        if tracking is not None and (
            add.get("baseRowId") is None or add.get("defaultRowCommitVersion") is None
        ):
            return f"input file {f.path}: row tracking, but no base row id or default row commit version"
    return None


def write_in_driver(
    files: HadoopFiles,
    table_uri: str,
    metadata: dict[str, Any],
    inputs: Sequence[LiveFile],
    output_id: str,
    order: SortConfig | None,
    codec: str,
    row_tracking: tuple[str, str] | None = None,
    certify: bool = True,
) -> tuple[dict[str, Any], Certificate | None]:
    """Read `inputs`, write their rows as one file of segment `output_id`, and return its `add`
    action (statistics merged from the inputs', `dataChange` left to the commit) and the
    certificate of its rows: each input's as read, the output's as handed to the Parquet writer.
    `row_tracking`: the materialised row id and row commit version columns, when the table tracks
    rows. `certify=False`: no certificate (None), no fingerprint computed."""
    schema = _arrow_schema(metadata)
    assert schema is not None
    columns = table_columns(metadata)
    read = [_read(files, table_uri, f, schema, output_id, row_tracking) for f in inputs]
    inputs_print = total(arrow_fingerprint(t, columns) for t in read) if certify else None
    rows = pa.concat_tables(read)
    if order is not None:
        rows = rows.take(
            pc.sort_indices(rows, [(c, "ascending") for c in order.by], null_placement="at_start")
        )
    certificate = (
        Certificate(inputs_print, arrow_fingerprint(rows, columns)) if inputs_print is not None else None
    )
    buffer = io.BytesIO()
    pq.write_table(
        rows,
        buffer,
        compression=_CODECS.get(codec, codec),
        use_dictionary=True,
        write_statistics=True,
        store_decimal_as_integer=True,
        coerce_timestamps="us",
    )
    data = buffer.getvalue()
    name = f"part-00000-{uuid.uuid4()}.c000.{'snappy' if codec == 'snappy' else codec}.parquet"
    relative = f"{SEGMENT_COLUMN}={output_id}/{name}"
    files.write_bytes(f"{table_uri.rstrip('/')}/{relative}", data)
    add = {
        "path": relative,
        "partitionValues": {SEGMENT_COLUMN: output_id},
        "size": len(data),
        "modificationTime": int(time.time() * 1000),
        "dataChange": False,
        "stats": merged_stats([f.add["stats"] for f in inputs], metadata),
    }
    return add, certificate


def _read(
    files: HadoopFiles,
    table_uri: str,
    file: LiveFile,
    schema: pa.Schema,
    output_id: str,
    row_tracking: tuple[str, str] | None = None,
) -> pa.Table:
    """One input's rows in the output's columns: its segment id replaced by the output's, a
    column the file lacks (added to the table since) filled with nulls; with `row_tracking`, each
    row's stable id and commit version after them."""
    path = (
        file.path
        if "://" in file.path or file.path.startswith("/")
        else f"{table_uri.rstrip('/')}/{file.path}"
    )
    local = files.local_path(path)
    source: Any = local if local is not None else io.BytesIO(files.read_bytes(path) or b"")
    with pq.ParquetFile(source) as parquet:  # half the CPU of `read_table`'s dataset for one file
        table = parquet.read()
    columns = []
    for f in schema:
        if f.name == SEGMENT_COLUMN:
            columns.append(pa.array([output_id] * table.num_rows, f.type))
        elif f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    if row_tracking is None:
        return pa.Table.from_arrays(columns, schema=schema)
    add = file.add
    fresh = (  # the ids and version the file's rows have where none is materialised
        pa.array(range(int(add["baseRowId"]), int(add["baseRowId"]) + table.num_rows), pa.int64()),
        pa.array([int(add["defaultRowCommitVersion"])] * table.num_rows, pa.int64()),
    )
    fields = list(schema)
    # Spark writes the partition column after the others, the row tracking columns among those
    at = len(fields) - 1 if fields and fields[-1].name == SEGMENT_COLUMN else len(fields)
    for name, default in zip(row_tracking, fresh, strict=True):
        stored = table.column(name).combine_chunks().cast(pa.int64()) if name in table.column_names else None
        columns.insert(at, default if stored is None else pc.coalesce(stored, default))
        fields.insert(at, pa.field(name, pa.int64()))
        at += 1
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _arrow_schema(metadata: dict[str, Any]) -> pa.Schema | None:
    """The columns a data file holds, as Arrow types: the table's, in its order, its partition
    column included unless `delta.writePartitionColumnsToParquet` is false (Delta writes it by
    default); None when one is not a flat primitive type."""
    fields = json.loads(metadata["schemaString"])["fields"]
    partitions = set(metadata.get("partitionColumns") or ())
    in_files = table_flag(table_config(metadata), "delta.writepartitioncolumnstoparquet", default=True)
    out = []
    for field in fields:
        if field["name"] in partitions and not in_files:
            continue
        kind = field["type"]
        if not isinstance(kind, str):
            return None
        decimal = _DECIMAL.fullmatch(kind)
        if decimal:
            arrow = pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
        elif kind in _ARROW:
            arrow = _ARROW[kind]()
        else:
            return None
        out.append(pa.field(field["name"], arrow, nullable=field.get("nullable", True)))
    return pa.schema(out)


def merged_stats(stats: Sequence[str], metadata: dict[str, Any]) -> str:
    """The Delta statistics of the union of files' rows, from theirs (pure): rows and null counts
    summed (a count kept where every file has it), minimums and maximums compared in each
    column's type, each kept as its file wrote it and left out where a file with values in the
    column has none (`_bounded`)."""
    types = {f["name"]: f["type"] for f in json.loads(metadata["schemaString"])["fields"]}
    parsed = [json.loads(s, parse_float=Decimal) for s in stats]
    out: dict[str, Any] = {"numRecords": sum(int(p["numRecords"]) for p in parsed)}
    for key, pick in (("minValues", min), ("maxValues", max)):
        columns: dict[str, Any] = {}
        for p in parsed:
            for name, value in (p.get(key) or {}).items():
                in_type = _in_type(types.get(name))
                columns[name] = value if name not in columns else pick(columns[name], value, key=in_type)
        if any(key in p for p in parsed):
            out[key] = {
                name: value for name, value in columns.items() if all(_bounded(p, key, name) for p in parsed)
            }
    if any("nullCount" in p for p in parsed):
        counts: dict[str, int] = {}
        for p in parsed:
            for name, n in (p.get("nullCount") or {}).items():
                counts[name] = counts.get(name, 0) + int(n)
        # a count some file lacks is unknown for the union: a sum of the others would be too low
        out["nullCount"] = {
            n: c for n, c in counts.items() if all(n in (p.get("nullCount") or {}) for p in parsed)
        }
    if any("tightBounds" in p for p in parsed):
        out["tightBounds"] = all(p.get("tightBounds", True) for p in parsed)
    return stats_json(out)


def _bounded(stats: dict[str, Any], key: str, column: str) -> bool:
    """Whether a file's statistics bound `column` on the side `key` names: they hold the bound,
    or the column holds only nulls there. A bound left out of a file with values (a writer that
    could not give it exactly, `footer_stats`; a string too long for Delta to cut) leaves the
    union's bound unknown too."""
    if column in (stats.get(key) or {}):
        return True
    nulls = (stats.get("nullCount") or {}).get(column)
    return nulls is not None and int(nulls) == int(stats["numRecords"])


def _in_type(kind: Any) -> Callable[[Any], Any]:
    """A statistic as it compares in its column's type."""

    def ordered(value: Any) -> Any:
        if kind in ("timestamp", "timestamp_ntz") and isinstance(value, str):
            return datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None)
        if kind == "string" and isinstance(value, str):
            return value.encode("utf-8", "surrogatepass")  # Spark compares strings by their UTF-8 bytes
        return value

    return ordered

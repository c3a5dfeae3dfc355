"""A data file's Delta statistics from its Parquet footer, instead of from every row (pure).

Delta collects a file's statistics (`numRecords`, each column's `minValues`, `maxValues` and
`nullCount`) as it writes the file, by evaluating an aggregate over every row: on a wide string
column that is most of what a large merge pays over a raw Parquet rewrite (1.5 s of 10.8 on the
1 GiB merge). The Parquet writer keeps the same facts per row group in the footer as it writes, so
a rewrite writes with Delta's collection off and reads them back from the file (`footer_stats`).

The JSON is Delta's, value for value (StatisticsCollection in delta-spark): rows and null counts
summed over row groups; minimums and maximums of the types Delta skips by (integers, floating
point with NaN above every number, decimals, dates and timestamps from 1900 on, strings), a
string's minimum cut to the table's prefix length in characters and its maximum cut and raised
by Delta's tie-breaker (`truncate_max`), timestamps in milliseconds as Spark's JSON writes them in
UTC; only the first `delta.dataSkippingNumIndexedCols` columns, partition columns left out,
`tightBounds` where the table has deletion vectors.

Where the footer cannot say exactly what Delta would, the statistic is left out, which a reader
takes as "unknown" (no file is skipped on it): the bounds and null count of a column Parquet's
writer kept no statistics of (values over 4 KiB), and dates and times before 1900. Tables whose
statistics this does not model (`refusal`: nested or unusual types, column mapping, row
tracking's extra columns, a list of statistics columns, a session zone other than UTC) keep
Delta's own collection.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import numpy as np

from compactor.delta.features import features, row_tracking_columns, table_config

DEFAULT_PREFIX_LENGTH = 32  # delta.dataSkippingStringPrefixLength
DEFAULT_INDEXED_COLUMNS = 32  # delta.dataSkippingNumIndexedCols
_BOUNDED = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz", "string"}
)
_COUNTED_ONLY = frozenset({"boolean", "binary"})  # null counts only, as Delta keeps them
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_ASCII_MAX = "\x7f"
# Spark may store older dates and times rebased to the Julian calendar (a legacy writer setting),
# so a footer's bounds before then need not be the values Spark reads: left out
REBASE_FREE_YEAR = 1900
_UTF8_MAX = "\U0010ffff"  # two UTF-16 units in a Java string: DBFF DFFF


def refusal(protocol: Mapping[str, Any], metadata: Mapping[str, Any], session_zone: str) -> str | None:
    """Why a write to this table must let Delta collect its statistics (None: footers serve)."""
    config = table_config(metadata)
    if config.get("delta.columnmapping.mode", "none") != "none":
        return "column mapping: the files' columns have physical names"
    if row_tracking_columns(protocol, metadata) is not None:
        return "row tracking: the files hold materialised columns the table's schema does not list"
    if config.get("delta.dataskippingstatscolumns"):
        return "delta.dataSkippingStatsColumns names the statistics' columns"
    if session_zone.upper() not in ("UTC", "Z", "+00:00", "ETC/UTC"):
        return f"session time zone {session_zone}: timestamps' statistics are written in it"
    if "variantType" in features(protocol) or "variantType-preview" in features(protocol):
        return "a variant column"
    for field in json.loads(metadata["schemaString"])["fields"]:
        kind = field["type"]
        if not isinstance(kind, str) or not (
            kind in _BOUNDED or kind in _COUNTED_ONLY or _DECIMAL.fullmatch(kind)
        ):
            return f"column {field['name']!r} of type {json.dumps(kind)}"
    return None


def footer_stats(
    footer: Any,
    protocol: Mapping[str, Any],
    metadata: Mapping[str, Any],
) -> str:
    """The Delta statistics (JSON) of the file whose footer is `footer` (a pyarrow
    `FileMetaData`), for a table `refusal` accepts."""
    config = table_config(metadata)
    prefix = int(config.get("delta.dataskippingstringprefixlength", DEFAULT_PREFIX_LENGTH))
    indexed = int(config.get("delta.dataskippingnumindexedcols", DEFAULT_INDEXED_COLUMNS))
    partitions = set(metadata.get("partitionColumns") or ())
    fields = [f for f in json.loads(metadata["schemaString"])["fields"] if f["name"] not in partitions]
    if indexed >= 0:
        fields = fields[:indexed]
    where = {footer.schema.column(i).path: i for i in range(footer.num_columns)}
    minimums: dict[str, Any] = {}
    maximums: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in fields:
        name, kind = field["name"], field["type"]
        at = where.get(name)
        if at is None:  # a column added after the file's rows were read: all null
            nulls[name] = footer.num_rows
            continue
        chunks = [footer.row_group(g).column(at).statistics for g in range(footer.num_row_groups)]
        if all(c is not None and c.has_null_count for c in chunks):
            nulls[name] = sum(c.null_count for c in chunks)
        if kind in _COUNTED_ONLY or not chunks:
            continue
        bounded = [c for c in chunks if c is not None and c.has_min_max]
        if any(c is None or (not c.has_min_max and c.num_values > 0) for c in chunks):
            continue  # a row group with values but no bounds: unknown
        if not bounded:
            continue  # every value null: Delta's minimum is null and left out of the JSON
        low = _bound(min(_ordered(kind, c.min) for c in bounded), kind, prefix, upper=False)
        high = _bound(max(_ordered(kind, c.max) for c in bounded), kind, prefix, upper=True)
        if low is not None:  # each bound stands alone: Delta leaves out a maximum it cannot cut
            minimums[name] = low
        if high is not None:
            maximums[name] = high
    stats: dict[str, Any] = {"numRecords": footer.num_rows}
    stats["minValues"], stats["maxValues"], stats["nullCount"] = minimums, maximums, nulls
    if "deletionVectors" in features(protocol):
        stats["tightBounds"] = True
    return stats_json(stats)


def _ordered(kind: str, value: Any) -> Any:
    """A footer's bound as it compares in its column's type: strings by their UTF-8 bytes, as
    Parquet and Spark order them."""
    if kind == "string":
        return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    if kind in ("float", "double"):  # NaN above every number, as Java, Parquet and Spark order it
        return (math.isnan(value), value)
    return value


def _bound(value: Any, kind: str, prefix: int, upper: bool) -> Any:
    """A column's bound as Delta's statistics hold it (None: not one Delta's would equal)."""
    if kind in ("float", "double"):
        return _floating(value[1], kind)
    if kind == "string":
        text = value.decode("utf-8", "surrogatepass")
        return truncate_max(text, prefix) if upper else truncate_min(text, prefix)
    if kind == "date":
        return value.isoformat() if isinstance(value, date) and value.year >= REBASE_FREE_YEAR else None
    if kind in ("timestamp", "timestamp_ntz"):
        return _timestamp(value, zoned=kind == "timestamp")
    decimal = _DECIMAL.fullmatch(kind)
    if decimal:
        return Decimal(value).quantize(Decimal(1).scaleb(-int(decimal.group(2))))
    return int(value)


def _floating(value: float, kind: str) -> float | str:
    """A floating-point bound as Spark's JSON writes it: NaN and the infinities as quoted names,
    a float by its shortest 32-bit digits (Java's `Float.toString`), a double by its own."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(str(np.float32(value))) if kind == "float" else float(value)


def _timestamp(value: Any, zoned: bool) -> str | None:
    """A timestamp as Spark's JSON writes it with the session in UTC: milliseconds, floored."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    if not REBASE_FREE_YEAR <= value.year <= 9999:
        return None
    text = f"{value:%Y-%m-%dT%H:%M:%S}.{value.microsecond // 1000:03d}"
    return text + "Z" if zoned else text


def truncate_min(text: str, prefix: int) -> str:
    """A string minimum cut to `prefix` characters (Spark's `substring`: code points)."""
    return text[: max(prefix, 0)]


def truncate_max(text: str, prefix: int) -> str | None:
    """A string maximum as Delta keeps it (`truncateMaxStringAgg`): cut after `prefix` UTF-16
    units (never inside a surrogate pair) and followed by a character above every one it cut,
    U+007F where that is enough, else U+10FFFF; None when no cut within twice the prefix works."""
    units = _utf16(text)
    if len(units) <= prefix:
        return text
    if prefix <= 0:
        return None
    at = prefix + 1 if _high(units[prefix - 1]) and _low(units[prefix]) else prefix
    limit = 2 * prefix
    while at <= limit:
        if at >= len(units):
            return text
        if at + 1 < len(units) and units[at] == 0xDBFF and units[at + 1] == 0xDFFF:
            at += 2
        elif units[at] < 0x7F:
            return _from_utf16(units[:at]) + _ASCII_MAX
        else:
            return _from_utf16(units[:at]) + _UTF8_MAX
    return None


def _utf16(text: str) -> Sequence[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def _from_utf16(units: Sequence[int]) -> str:
    return b"".join(u.to_bytes(2, "little") for u in units).decode("utf-16-le", "surrogatepass")


def _high(unit: int) -> bool:
    return 0xD800 <= unit <= 0xDBFF


def _low(unit: int) -> bool:
    return 0xDC00 <= unit <= 0xDFFF


def stats_json(value: Any) -> str:
    """Statistics' JSON as Delta writes it: compact, unescaped, each decimal as Java's
    `BigDecimal.toString` writes it (`0.00` stays `0.00`, 1E-7 is written so in both)."""
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{stats_json(v)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

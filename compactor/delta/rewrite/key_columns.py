"""A Spark read of key rows, through Arrow, as the key index's columns (`KeyColumns`): the
comparison values coded straight from the Arrow arrays, exactly as `key_values.encode_values`
codes the Python values the same rows would give, with no Python object per row. A read whose
values Arrow cannot code so (strings, decimals, unsigned 64-bit ints, an int64 equal to the code
kept for None) comes back as rows instead."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from compactor.catalog.key_index import KeyColumns, KeyRow
from compactor.catalog.key_values import ABSENT, Ints, float_codes
from compactor.delta.paths import SEGMENT_COLUMN


def key_columns(read: pa.Table) -> list[KeyRow | KeyColumns]:
    """`read` (columns key, value, row_hash and the segment id) as the index takes it: one
    `KeyColumns`, or the rows."""
    coded = arrow_codes(read.column("value").combine_chunks())
    if coded is None:
        lists = [read.column(name).to_pylist() for name in ("key", "value", "row_hash", SEGMENT_COLUMN)]
        return [KeyRow(*row) for row in zip(*lists, strict=True)]
    kind, values = coded
    segments = pc.dictionary_encode(read.column(SEGMENT_COLUMN)).combine_chunks()
    columns = KeyColumns(
        _int64s(read.column("key").combine_chunks()),
        kind,
        values,
        _int64s(read.column("row_hash").combine_chunks()),
        segments.indices.to_numpy(zero_copy_only=False).astype(np.int64),
        segments.dictionary.to_pylist(),
    )
    return [columns]


def arrow_codes(values: pa.Array) -> tuple[str | None, Ints] | None:
    """The codes and kind `encode_values` gives `values.to_pylist()`; None where it gives None
    or where Arrow's type is not one it codes (the caller reads Python values then)."""
    kind = _kind_of(values.type)
    if kind is None:
        return None
    if values.null_count == len(values):
        return None, np.full(len(values), ABSENT, np.int64)
    if kind == "float":
        codes = float_codes(_filled(values.cast(pa.float64()), 0.0).astype(np.float64))
    elif kind == "date":
        codes = _filled(values.view(pa.int32()).cast(pa.int64()), 0)
    elif kind in ("datetime", "naive"):
        micros = values.cast(pa.timestamp("us", values.type.tz))  # Spark's unit: never truncates
        codes = _filled(micros.view(pa.int64()), 0)
    else:
        codes = _filled(values.cast(pa.int64()), 0)
        if (codes == ABSENT).any():
            return None  # the one int64 the codes keep for None
    if values.null_count:
        codes[values.is_null().to_numpy(zero_copy_only=False)] = ABSENT
    return kind, codes


def _kind_of(arrow_type: pa.DataType) -> str | None:
    if pa.types.is_boolean(arrow_type) or (
        pa.types.is_integer(arrow_type) and not pa.types.is_uint64(arrow_type)
    ):
        return "int"
    if pa.types.is_floating(arrow_type):
        return "float"
    if pa.types.is_date32(arrow_type):
        return "date"
    if pa.types.is_timestamp(arrow_type):
        return "naive" if arrow_type.tz is None else "datetime"
    return None


def _filled(values: pa.Array, fill: int | float) -> npt.NDArray[Any]:
    """A writable numpy copy, nulls as `fill` (coded after)."""
    return np.array(values.fill_null(fill).to_numpy(zero_copy_only=False))


def _int64s(values: pa.Array) -> Ints:
    return np.asarray(values.to_numpy(zero_copy_only=False), np.int64)

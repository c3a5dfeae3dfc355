"""Row fingerprints (`domain/certificate.py`), computed where the rows already are.

One row hash serves every path, so that a certificate made by one can be checked by another:
Spark's `xxhash64` (seed 42) of the row's columns in the table's order, each column followed by
whether it is null (xxhash64 skips a null, so without the flag a null and a missing value would
hash alike). The segment id is left out: a merge gives every row its output's id.

- In Spark, the hash is an expression summed where the frame being written passes (inside the
  stage's generated code, `spark/hash_counter.py`), so the fingerprint is taken in the job that
  reads or writes the rows, not in another pass.
- In the driver (small merges written with Arrow), the same hash is computed over Arrow arrays:
  XXH64 of a 4- or 8-byte value vectorised with numpy, of strings, binaries and wide decimals
  with the `xxhash` library, value by value (such merges are small by construction).

Spark hashes a float or double as its bits with -0.0 taken as 0.0 and every NaN as one NaN,
an integer narrower than 32 bits as a 32-bit one, a date as its day number, a timestamp as its
microseconds, a decimal of up to 18 digits as its unscaled 64-bit integer and a wider one as the
big-endian two's complement bytes of its unscaled value. So a merge that turns -0.0 into 0.0 is
not seen; nothing the compactor writes does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType, VariantType

from compactor.delta.paths import SEGMENT_COLUMN
from compactor.domain.certificate import Fingerprint
from compactor.spark import hash_counter

SEED = 42  # Spark's xxhash64 seed
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_FLOAT_NAN = 0x7FC00000  # Java's floatToIntBits of any NaN
_DOUBLE_NAN = 0x7FF8000000000000


def table_columns(metadata: Mapping[str, Any]) -> list[str]:
    """The columns a reader of the table sees, in its schema's order (Delta's `metaData`)."""
    return [field["name"] for field in json.loads(metadata["schemaString"])["fields"]]


def fingerprinted_columns(columns: Sequence[str]) -> list[str]:
    """The columns a fingerprint covers, in order: all but the segment id."""
    return [c for c in columns if c != SEGMENT_COLUMN]


# -- Spark ------------------------------------------------------------------------------------


def row_hash(schema: StructType, columns: Sequence[str]) -> Column:
    """Each row's hash, as a Spark expression (a signed 64-bit integer), over `columns` of a
    frame of `schema`. A column Spark cannot hash (a map or a variant, at any depth) is hashed as
    its JSON text: a merge copies a row's map entries in their order, so the text is the same."""
    types = {field.name: field.dataType for field in schema.fields}
    parts: list[Column] = []
    for name in fingerprinted_columns(columns):
        column = F.col(f"`{name}`")
        hashed = F.to_json(F.struct(column)) if _unhashable(types[name]) else column
        parts += [hashed, column.isNull()]
    return F.xxhash64(*parts) if parts else F.lit(SEED).cast("long")


def _unhashable(kind: DataType) -> bool:
    if isinstance(kind, MapType | VariantType):
        return True
    if isinstance(kind, ArrayType):
        return _unhashable(kind.elementType)
    if isinstance(kind, StructType):
        return any(_unhashable(field.dataType) for field in kind.fields)
    return False


# A sum of 64-bit hashes, exact, from long sums only: each hash cut into four 16-bit parts (the top
# one signed), each part summed as a long. A decimal(38,0) sum would be exact too, but it boxes
# every row's hash in a BigDecimal (most hashes have 19 digits, past a compact decimal) and cost a
# third of a large merge's time; these sums stay primitive, exact below 2^47 rows.
_PART_BITS = 16
_PARTS = 4


def hash_sums(hashes: Column, name: str) -> list[Column]:
    """Aggregates that sum the 64-bit `hashes` exactly, named `name_0`..`name_3`; `hash_total`
    reads the sum back from the aggregated row."""
    low = (1 << _PART_BITS) - 1
    top = _PART_BITS * (_PARTS - 1)
    parts = [F.shiftright(hashes, _PART_BITS * i).bitwiseAND(F.lit(low)) for i in range(_PARTS - 1)]
    parts.append(F.shiftright(hashes, top))  # signed: a negative hash's top part is negative
    return [F.coalesce(F.sum(part), F.lit(0)).alias(f"{name}_{i}") for i, part in enumerate(parts)]


def hash_total(found: Mapping[str, Any], name: str) -> int:
    """The exact sum `hash_sums(_, name)` aggregated, from the aggregated row."""
    return sum(int(found[f"{name}_{i}"]) << (_PART_BITS * i) for i in range(_PARTS))


def row_hash_sums(frame: DataFrame, columns: Sequence[str], name: str) -> list[Column]:
    """`hash_sums` of the rows' hashes (`row_hash`), to take with the row count in an aggregation
    the rewrite already runs (`Fingerprint.of(rows, hash_total(row, name))`)."""
    return hash_sums(row_hash(frame.schema, columns), name)


def _summed(frame: DataFrame, columns: Sequence[str], second: Column | None) -> list[Column]:
    """The rows counted and their hashes summed exactly; with `second`, a second row hash summed
    beside them."""
    sums = [F.count(F.lit(1)).alias("rows"), *row_hash_sums(frame, columns, "digest")]
    if second is not None:
        sums += hash_sums(second, "second")
    return sums


def _prints(found: Mapping[str, Any]) -> tuple[Fingerprint, Fingerprint | None]:
    rows = int(found["rows"])
    second = Fingerprint.of(rows, hash_total(found, "second")) if "second_0" in found else None
    return Fingerprint.of(rows, hash_total(found, "digest")), second


class Watch:
    """The fingerprints of a frame's rows, taken as the job that consumes the frame runs; read
    them (`observed`, `observed_both`) once that job is done."""

    def __init__(self, read: Callable[[], tuple[Fingerprint, Fingerprint | None]]) -> None:
        self._read = read

    def both(self) -> tuple[Fingerprint, Fingerprint | None]:
        return self._read()


def observe(
    frame: DataFrame, columns: Sequence[str], second: Column | None = None
) -> tuple[DataFrame, Watch]:
    """`frame`, fingerprinted as the job that consumes it runs. `second`: another row hash of
    `frame` to sum in the same pass (`observed_both`).

    The sums are taken inside the stage's generated code (`hash_counter`) where the JVM has our
    class, else by Spark's `Observation`, whose operator Spark interprets row by row."""
    hashes = [row_hash(frame.schema, columns), *([second] if second is not None else [])]
    counted = hash_counter.counted(frame, hashes)
    if counted is not None:
        frame, sums = counted

        def read() -> tuple[Fingerprint, Fingerprint | None]:
            prints = [Fingerprint.of(s.rows(), s.total()) for s in sums]
            return prints[0], (prints[1] if second is not None else None)

        return frame, Watch(read)
    observation = Observation()
    frame = frame.observe(observation, *_summed(frame, columns, second))
    return frame, Watch(lambda: _prints(observation.get))


def sums_wait_for_sql_execution(spark: SparkSession) -> bool:
    """Whether `observe` takes its sums with Spark `Observation`s (the row-hash class missing),
    which complete only when the SQL execution that consumes the frame ends."""
    return not hash_counter.loaded(spark)


def observed(watch: Watch) -> Fingerprint:
    """A watched frame's fingerprint (its job must have run)."""
    return watch.both()[0]


def observed_both(watch: Watch) -> tuple[Fingerprint, Fingerprint | None]:
    """A watched frame's fingerprint, and its second row hash's (None: it took none)."""
    return watch.both()


def spark_fingerprint(frame: DataFrame, columns: Sequence[str]) -> Fingerprint:
    """The fingerprint of a frame's rows, in a job of its own (for checking after the fact)."""
    return spark_fingerprints(frame, columns)[0]


def spark_fingerprints(
    frame: DataFrame, columns: Sequence[str], second: Column | None = None
) -> tuple[Fingerprint, Fingerprint | None]:
    """`spark_fingerprint`, and `second` summed in the same job (None: not asked)."""
    row = frame.select(*_summed(frame, columns, second)).first()
    assert row is not None
    return _prints(row.asDict())


# -- Arrow ------------------------------------------------------------------------------------


def arrow_fingerprint(table: pa.Table, columns: Sequence[str] | None = None) -> Fingerprint:
    """The fingerprint of an Arrow table's rows over `columns` (None: all of its columns), the
    segment id left out; the same value Spark's `row_hash` sums for the same rows."""
    names = fingerprinted_columns(columns if columns is not None else table.column_names)
    hashes = np.full(table.num_rows, SEED, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in names:
            array = table.column(name).combine_chunks()
            nulls = array.is_null().to_numpy(zero_copy_only=False)
            hashed = _hash_values(array, hashes)
            hashes = np.where(nulls, hashes, hashed)
            hashes = _hash_int(nulls.astype(np.uint64), hashes)
    return Fingerprint.of(table.num_rows, int(hashes.sum(dtype=np.uint64)))


def _hash_values(array: pa.Array, seeds: np.ndarray) -> np.ndarray:
    """Each value's XXH64 with its row's seed, as Spark hashes the value's type (a null's result
    is ignored by the caller)."""
    kind = array.type
    if pa.types.is_boolean(kind):
        return _hash_int(_filled(array.cast(pa.uint8()), 0).astype(np.uint64), seeds)
    if pa.types.is_date32(kind) or (pa.types.is_integer(kind) and kind.bit_width <= 32):
        ints = array.view(pa.int32()) if pa.types.is_date32(kind) else array.cast(pa.int32())
        return _hash_int(_filled(ints, 0).astype(np.int32).view(np.uint32).astype(np.uint64), seeds)
    if pa.types.is_integer(kind):
        return _hash_long(_filled(array.cast(pa.int64()), 0).astype(np.int64).view(np.uint64), seeds)
    if pa.types.is_timestamp(kind):
        micros = pc.cast(array, pa.timestamp("us", tz=kind.tz)).view(pa.int64())
        return _hash_long(_filled(micros, 0).astype(np.int64).view(np.uint64), seeds)
    if pa.types.is_float32(kind):
        floats = _filled(array, 0.0).astype(np.float32)
        return _hash_int(_float_bits(floats, np.uint32, _FLOAT_NAN).astype(np.uint64), seeds)
    if pa.types.is_float64(kind):
        return _hash_long(_float_bits(_filled(array, 0.0).astype(np.float64), np.uint64, _DOUBLE_NAN), seeds)
    if pa.types.is_decimal(kind) and kind.precision <= 18:
        return _hash_long(_unscaled_longs(array).view(np.uint64), seeds)
    if pa.types.is_decimal(kind):
        nulls = array.is_null().to_pylist()
        wide = [
            None if null else _java_bytes(v) for v, null in zip(_unscaled_ints(array), nulls, strict=True)
        ]
        return _hash_bytes(wide, seeds)
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return _hash_bytes(array.cast(pa.binary()).to_pylist(), seeds)
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        return _hash_bytes(array.cast(pa.large_binary()).to_pylist(), seeds)
    raise TypeError(f"no row fingerprint for a column of type {kind}")


def _float_bits(values: np.ndarray, bits: type[np.unsignedinteger[Any]], nan: int) -> np.ndarray:
    """Java's `floatToIntBits`/`doubleToLongBits` after Spark's hashing rules: -0.0 as 0.0, one NaN."""
    out = values.view(bits).copy()
    out[values == 0] = 0
    out[np.isnan(values)] = nan
    return out


def _filled(array: pa.Array, fill: object) -> np.ndarray:
    filled: np.ndarray = np.asarray(array.fill_null(fill).to_numpy(zero_copy_only=False))
    return filled


def _unscaled_longs(array: pa.Array) -> np.ndarray:
    """A decimal128 array's unscaled values (each fits 64 bits: precision <= 18): the low half
    of each little-endian 16-byte value."""
    data = array.buffers()[1]
    words = np.frombuffer(data, dtype=np.int64)[2 * array.offset : 2 * (array.offset + len(array))]
    return words[0::2].copy()


def _unscaled_ints(array: pa.Array) -> list[int]:
    """A decimal array's unscaled values, exact (read from its little-endian words: a Python
    `Decimal` rounds past its context's 28 digits, and Spark's decimals hold 38)."""
    width = array.type.byte_width
    data = array.buffers()[1]
    if data is None:
        return [0] * len(array)
    raw = memoryview(data)[width * array.offset : width * (array.offset + len(array))]
    return [int.from_bytes(raw[i : i + width], "little", signed=True) for i in range(0, len(raw), width)]


def _java_bytes(value: int) -> bytes:
    """Java's `BigInteger.toByteArray`: the shortest big-endian two's complement, with room for
    the sign bit. Java's `bitLength` of a negative value is that of its complement: -128 takes
    one byte (0x80), where Python's `bit_length` (of its magnitude) would ask for two."""
    bits = value.bit_length() if value >= 0 else (~value).bit_length()
    return value.to_bytes(bits // 8 + 1, "big", signed=True)


def _hash_bytes(values: Sequence[bytes | None], seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each value with its row's seed; a null's result is ignored by the caller, so it
    is hashed as empty (`map` over two lists calls the C function without a Python loop)."""
    filled = cast(Sequence[bytes], values if None not in values else [v or b"" for v in values])
    hashed = map(xxhash.xxh64_intdigest, filled, seeds.tolist())
    return np.fromiter(hashed, dtype=np.uint64, count=len(seeds))


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _avalanche(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    mixed: np.ndarray = h ^ (h >> np.uint64(32))
    return mixed


def _hash_int(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each 4-byte value (given as its unsigned 32 bits) with its seed."""
    h = seeds + _P5 + np.uint64(4)
    h = h ^ (values * _P1)
    h = _rotl(h, 23) * _P2 + _P3
    return _avalanche(h)


def _hash_long(values: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """XXH64 of each 8-byte value with its seed."""
    h = seeds + _P5 + np.uint64(8)
    h = h ^ (_rotl(values * _P2, 31) * _P1)
    h = _rotl(h, 27) * _P1 + _P4
    return _avalanche(h)

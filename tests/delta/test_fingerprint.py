"""The row fingerprint: independent of order and file split, changed by any one-row change, and
the same in the driver (Arrow) as in Spark for every column type a table may hold."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.delta.content.fingerprint import arrow_fingerprint, hash_sums, hash_total, spark_fingerprint
from compactor.domain.certificate import Certificate, Fingerprint, IndexedWinners, Winners, total

UTC = dt.UTC
# column name -> (Arrow type, Spark DDL type, values)
COLUMNS: dict[str, tuple[pa.DataType, str, st.SearchStrategy[Any]]] = {
    "b": (pa.int8(), "byte", st.integers(-128, 127)),
    "h": (pa.int16(), "short", st.integers(-(2**15), 2**15 - 1)),
    "i": (pa.int32(), "int", st.integers(-(2**31), 2**31 - 1)),
    "l": (pa.int64(), "long", st.integers(-(2**63), 2**63 - 1)),
    "t": (pa.bool_(), "boolean", st.booleans()),
    "f": (pa.float32(), "float", st.floats(width=32)),
    "d": (pa.float64(), "double", st.floats()),
    "s": (pa.string(), "string", st.text(max_size=40)),
    "y": (pa.binary(), "binary", st.binary(max_size=20)),
    "day": (pa.date32(), "date", st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))),
    "ts": (
        pa.timestamp("us", tz="UTC"),
        "timestamp",
        st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(UTC)),
    ),
    "m": (pa.decimal128(10, 2), "decimal(10,2)", st.decimals(-(10**8) + 1, 10**8 - 1, places=2)),
    "w": (pa.decimal128(25, 3), "decimal(25,3)", st.decimals(-(10**22) + 1, 10**22 - 1, places=3)),
}
SCHEMA = pa.schema([pa.field(name, kind) for name, (kind, _, _) in COLUMNS.items()])


@st.composite
def tables(draw: st.DrawFn, min_rows: int = 0, max_rows: int = 12) -> pa.Table:
    n = draw(st.integers(min_rows, max_rows))
    columns = {
        name: draw(st.lists(st.none() | values, min_size=n, max_size=n))
        for name, (_, _, values) in COLUMNS.items()
    }
    return pa.table(columns, schema=SCHEMA)


@settings(max_examples=60, deadline=None)
@given(tables(), st.randoms(use_true_random=False), st.data())
def test_the_fingerprint_ignores_order_and_how_rows_are_split_into_files(
    table: pa.Table, random: Any, data: st.DataObject
) -> None:
    order = list(range(table.num_rows))
    random.shuffle(order)
    shuffled = table.take(pa.array(order, pa.int64()))
    assert arrow_fingerprint(shuffled) == arrow_fingerprint(table)
    cut = data.draw(st.integers(0, table.num_rows))
    parts = [table.slice(0, cut), table.slice(cut)]
    assert total(arrow_fingerprint(p) for p in parts) == arrow_fingerprint(table)
    assert arrow_fingerprint(table).rows == table.num_rows


@settings(max_examples=80, deadline=None)
@given(tables(min_rows=1), st.data())
def test_any_one_row_changed_dropped_or_repeated_changes_the_fingerprint(
    table: pa.Table, data: st.DataObject
) -> None:
    row = data.draw(st.integers(0, table.num_rows - 1))
    name = data.draw(st.sampled_from(list(COLUMNS)))
    values = table.column(name).to_pylist()
    replacement = data.draw(st.none() | COLUMNS[name][2])
    same = replacement == values[row] and (replacement is None) == (values[row] is None)
    if name in ("f", "d") and replacement is not None and values[row] is not None:
        # Spark's hash takes -0.0 as 0.0 and every NaN as one: those are the same value to it
        same = same or (replacement != replacement and values[row] != values[row])
    if same or (name in ("f", "d") and replacement == 0 and values[row] == 0):
        return
    values[row] = replacement
    changed = table.set_column(
        table.schema.get_field_index(name), name, pa.array(values, SCHEMA.field(name).type)
    )
    before = arrow_fingerprint(table)
    assert arrow_fingerprint(changed) != before
    dropped = pa.concat_tables([table.slice(0, row), table.slice(row + 1)])
    assert arrow_fingerprint(dropped) != before
    repeated = pa.concat_tables([table, table.slice(row, 1)])
    assert arrow_fingerprint(repeated) != before


def test_a_null_is_not_a_missing_value_nor_a_zero() -> None:
    prints = {
        arrow_fingerprint(pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(b, pa.int64())}))
        for a, b in [([None], [0]), ([0], [None]), ([0], [0]), ([None], [None])]
    }
    assert len(prints) == 4


def test_the_segment_id_is_left_out() -> None:
    one = pa.table({"k": [1, 2], "segment_id": ["a", "a"]})
    other = pa.table({"k": [1, 2], "segment_id": ["merged", "merged"]})
    assert arrow_fingerprint(one) == arrow_fingerprint(other)


def test_a_certificate_names_both_sides_and_reads_back() -> None:
    inputs, output = Fingerprint(3, 0xABC), Fingerprint(2, 0xDEF)
    certificate = Certificate(inputs, output)
    assert certificate.mismatch() == (
        "inputs 3 rows, 0000000000000abc but output 2 rows, 0000000000000def: 1 row(s) fewer"
    )
    assert Certificate.from_dict(certificate.to_dict()) == certificate
    assert Certificate(inputs, inputs).mismatch() is None
    assert Certificate(inputs, Fingerprint(3, 1)).mismatch() == (
        "inputs 3 rows, 0000000000000abc but output 3 rows, 0000000000000001: "
        "the same row count, different content"
    )
    with pytest.raises(ValueError, match="fingerprint digest 'xyz' is not 16 hexadecimal digits"):
        Fingerprint.from_dict({"rows": 1, "digest": "xyz"})
    with pytest.raises(ValueError, match="fingerprint rows -1 is not a row count"):
        Fingerprint.from_dict({"rows": -1, "digest": "0" * 16})
    assert Fingerprint(1, 2**64 - 1) + Fingerprint(1, 2) == Fingerprint(2, 1), "modulo 2^64"


def test_an_upsert_certificate_names_the_index_and_the_kept_rows_and_reads_back() -> None:
    rows = Fingerprint(3, 0xABC)
    wrong = Winners(index=Fingerprint(3, 0xABC), kept=Fingerprint(3, 0x1))
    certificate = Certificate(rows, rows, winners=wrong)
    assert not certificate.holds
    assert certificate.mismatch() == (
        "the key index says the inputs win 3 rows, 0000000000000abc but the merge kept 3 rows, "
        "0000000000000001: the same row count, different content"
    )
    both = Certificate(rows, Fingerprint(2, 0xDEF), winners=wrong).mismatch()
    assert both is not None and both.startswith("inputs 3 rows") and "; the key index says" in both
    assert Certificate.from_dict(certificate.to_metadata()) == certificate, "the commit's record"
    assert "winners" not in certificate.to_dict(), "events carry the certificate without it"
    assert Certificate.from_dict(certificate.to_dict()) == Certificate(rows, rows)
    with pytest.raises(ValueError, match="certificate winners 'x' is not a record"):
        Certificate.from_dict(certificate.to_dict() | {"winners": "x"})
    known = IndexedWinners(rows, {"a": 2, "b": 1})
    assert known.applies_to({"a": 2, "b": 1})
    assert not known.applies_to({"a": 2, "b": 1, "late": 4}), "a load the index never read"
    assert not known.applies_to({"a": 2, "b": 0}), "rows deleted since"
    assert not known.applies_to({"a": 2, "b": None}), "a file without statistics"


@pytest.mark.integration
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables(max_rows=8))
def test_the_driver_computes_the_fingerprint_spark_computes(spark: Any, table: pa.Table) -> None:
    ddl = ", ".join(f"{name} {ddl}" for name, (_, ddl, _) in COLUMNS.items())
    frame = spark.createDataFrame([tuple(r.values()) for r in table.to_pylist()], ddl)
    assert spark_fingerprint(frame, frame.columns) == arrow_fingerprint(table)


@pytest.mark.integration
def test_hashes_are_summed_exactly_at_every_edge_of_a_long(spark: Any) -> None:
    """The sum Spark takes in long parts is the exact sum of the signed hashes, where a plain long
    sum would overflow (thousands of rows at the extremes) and for none at all."""
    edges = [-(2**63), 2**63 - 1, -1, 0, 1, 2**16 - 1, 2**16, -(2**16), 2**48 - 1, -(2**48), 2**32 + 5]
    values = edges * 300
    frame = spark.createDataFrame([(v,) for v in values], "h long")
    found = frame.select(*hash_sums(frame.h, "x")).first()
    assert found is not None and hash_total(found.asDict(), "x") == sum(values)
    empty = frame.where("h IS NULL").select(*hash_sums(frame.h, "x")).first()
    assert empty is not None and hash_total(empty.asDict(), "x") == 0


# Unscaled values at the edges of a byte of two's complement, where a negative value needs one
# byte less than its magnitude's bits suggest (found by the test above: -0.128 in a decimal(25,3))
EDGES = [
    "-0.128", "-0.129", "0.127", "0.128", "-32.768", "-32.769", "32.767", "32.768",
    "-8388.608", "8388.608", "0.000", "-0.001", "0.255", "-0.256",
]  # fmt: skip


@pytest.mark.integration
def test_decimals_of_38_digits_hash_as_spark_hashes_them(spark: Any) -> None:
    """Past a Python Decimal's 28 digits of context, where scaling one rounds it."""
    values = [
        Decimal("12345678901234567890123456789012.345678"),
        Decimal("-99999999999999999999999999999999.999999"),
    ]
    table = pa.table({"x": pa.array(values, pa.decimal128(38, 6))})
    frame = spark.createDataFrame([(v,) for v in values], "x decimal(38,6)")
    assert spark_fingerprint(frame, ["x"]) == arrow_fingerprint(table)


@pytest.mark.integration
def test_wide_decimals_at_the_edges_of_a_byte_hash_as_spark_hashes_them(spark: Any) -> None:
    values = [Decimal(v) for v in EDGES]
    table = pa.table({"w": pa.array(values, pa.decimal128(25, 3))})
    frame = spark.createDataFrame([(v,) for v in values], "w decimal(25,3)")
    for i in range(len(values)):
        one = table.slice(i, 1)
        assert spark_fingerprint(frame.where(frame.w == values[i]), ["w"]) == arrow_fingerprint(one), EDGES[i]


def test_java_s_byte_array_of_a_big_integer_is_the_shortest_twos_complement() -> None:
    from compactor.delta.content.fingerprint import _java_bytes

    java = {  # BigInteger.valueOf(v).toByteArray()
        0: b"\x00", -1: b"\xff", 127: b"\x7f", 128: b"\x00\x80", -128: b"\x80", -129: b"\xff\x7f",
        255: b"\x00\xff", -256: b"\xff\x00", 32767: b"\x7f\xff", -32768: b"\x80\x00",
        -32769: b"\xff\x7f\xff", 2**63: b"\x00\x80" + b"\x00" * 7, -(2**63): b"\x80" + b"\x00" * 7,
    }  # fmt: skip
    assert {v: _java_bytes(v) for v in java} == java


def test_the_fingerprint_of_every_type_with_nan_negative_zero_and_wide_decimals() -> None:
    """Fixed values whose fingerprint was checked against Spark (the test above): a change in
    how a type is hashed shows here without Spark."""
    row = {
        "b": -128, "h": 7, "i": -3, "l": 2**40, "t": True, "f": float("nan"), "d": -0.0,
        "s": "ünï", "y": b"\x00", "day": dt.date(1960, 1, 1),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
        "m": Decimal("-0.01"), "w": Decimal("123456789012345678901.5"),
    }  # fmt: skip
    table = pa.table({k: [v] for k, v in row.items()}, schema=SCHEMA)
    assert arrow_fingerprint(table) == Fingerprint(1, 0xD34C027B6FF3E77C)  # Spark's, on 2026-11-28
    negative_zero_as_zero = table.set_column(table.schema.get_field_index("d"), "d", pa.array([0.0]))
    assert arrow_fingerprint(negative_zero_as_zero) == arrow_fingerprint(table)

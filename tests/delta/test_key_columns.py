"""Arrow's arrays coded for the key index give exactly the codes the Python values they hold get
(`key_values.encode_values`): every type Spark reads a comparison column as, with nulls, NaN,
signed zeros and the extremes (hypothesis; no Spark needed)."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.catalog.key_index import KeyColumns, KeyRow
from compactor.catalog.key_values import encode_values
from compactor.delta.rewrite.key_columns import arrow_codes, key_columns

EPOCH = datetime(1970, 1, 1)
INT64 = (-(2**63), 2**63 - 1)

# an Arrow type, and the Python values it holds (None among them)
typed = st.one_of(
    st.tuples(st.just(pa.int64()), st.lists(st.none() | st.integers(*INT64), max_size=8)),
    st.tuples(st.just(pa.int32()), st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=8)),
    st.tuples(st.just(pa.int8()), st.lists(st.none() | st.integers(-128, 127), max_size=8)),
    st.tuples(st.just(pa.bool_()), st.lists(st.none() | st.booleans(), max_size=8)),
    st.tuples(st.just(pa.float64()), st.lists(st.none() | st.floats(), max_size=8)),
    st.tuples(st.just(pa.float32()), st.lists(st.none() | st.floats(width=32), max_size=8)),
    st.tuples(st.just(pa.date32()), st.lists(st.none() | st.dates(), max_size=8)),
    st.tuples(
        st.sampled_from([pa.timestamp("us", "UTC"), pa.timestamp("us", "Europe/Paris")]),
        st.lists(st.none() | st.datetimes(timezones=st.just(UTC)), max_size=8),
    ),
    st.tuples(
        st.just(pa.timestamp("us")),
        st.lists(st.none() | st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31)), max_size=8),
    ),
)


@given(typed)
@settings(max_examples=400, deadline=None)
def test_arrow_codes_are_the_codes_of_the_python_values(case: tuple[pa.DataType, list[Any]]) -> None:
    arrow_type, values = case
    array = pa.array(values, arrow_type)
    coded = arrow_codes(array)
    expected = encode_values(array.to_pylist())
    if coded is None:  # Arrow leaves to Python only what Python cannot code either
        assert expected is None
        return
    assert same(coded, expected)


def same(found: tuple[str | None, Any] | None, expected: tuple[str | None, Any] | None) -> bool:
    return (
        found is not None
        and expected is not None
        and (found[0], found[1].tolist())
        == (
            expected[0],
            expected[1].tolist(),
        )
    )


def test_types_arrow_does_not_code_are_left_to_python() -> None:
    assert arrow_codes(pa.array(["a", None])) is None
    assert arrow_codes(pa.array([1, 2], pa.uint64())) is None
    assert arrow_codes(pa.array([-(2**63), 1], pa.int64())) is None, "the code kept for None"
    assert same(arrow_codes(pa.array([None, None], pa.int64())), encode_values([None, None]))
    special = pa.array([math.nan, -0.0, 0.0, -math.inf, None], pa.float64())
    assert same(arrow_codes(special), encode_values(special.to_pylist()))


def test_a_read_becomes_columns_with_its_segments_dictionary_or_rows_when_not_coded() -> None:
    read = pa.table(
        {
            "key": pa.array([5, 6, 7], pa.int64()),
            "value": pa.array([date(2024, 1, 2), None, date(1969, 12, 31)]),
            "row_hash": pa.array([-1, 0, 1], pa.int64()),
            "segment_id": pa.array(["b", "a", "b"]),
        }
    )
    (columns,) = key_columns(read)
    assert isinstance(columns, KeyColumns) and columns.kind == "date"
    assert columns.rows() == [
        KeyRow(5, date(2024, 1, 2), -1, "b"),
        KeyRow(6, None, 0, "a"),
        KeyRow(7, date(1969, 12, 31), 1, "b"),
    ]
    assert isinstance(columns.keys, np.ndarray) and columns.values.flags.writeable
    texts = read.set_column(1, "value", pa.array(["x", None, "y"]))
    assert key_columns(texts) == [KeyRow(5, "x", -1, "b"), KeyRow(6, None, 0, "a"), KeyRow(7, "y", 1, "b")]
    stamps = read.set_column(
        1, "value", pa.array([EPOCH + timedelta(microseconds=1)] * 3, pa.timestamp("us"))
    )
    (naive,) = key_columns(stamps)
    assert isinstance(naive, KeyColumns) and naive.kind == "naive" and naive.values.tolist() == [1, 1, 1]

"""Comparison values as int64 codes whose integer order is the order the values compare in, so
the key index keeps them in numpy columns (see `catalog.key_index`): ints and bools as
themselves; floats by their bits with the magnitude of negatives flipped (-0.0 counts as 0.0,
as Python's == says; NaN above +inf and equal to itself, as Spark ranks it); datetimes as
microseconds since the epoch (aware and naive apart: they do not compare); dates as days. None
("absent", below every value) is `ABSENT`, which no coded value takes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]

ABSENT = np.iinfo(np.int64).min  # an encoded None: below every encoded value
_FLIP = np.int64(0x7FFF_FFFF_FFFF_FFFF)  # a negative float's magnitude bits, flipped
_NAN = np.int64(0x7FF8_0000_0000_0000)  # the one NaN (positive, quiet): above +inf's bits
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_MICRO = timedelta(microseconds=1)


def encode_values(values: Sequence[Any]) -> tuple[str | None, Ints] | None:
    """Comparison values as int64 codes in the order the values compare in, None as `ABSENT`
    (below every code); with their kind ("int", "float", "datetime", "naive": datetimes
    without a zone, "date"; None when every value is None). None when they cannot be coded:
    another type, two kinds, or an int beyond 64 bits (see the module)."""
    types = set(map(type, values))
    kinds = {_kind_of(t) for t in types}
    kinds.discard("")
    if len(kinds) > 1 or None in kinds:
        return None
    if not kinds:
        return None, np.full(len(values), ABSENT, np.int64)
    kind = kinds.pop()
    absent = type(None) in types
    plain = [0 if v is None else v for v in values] if absent else values  # None is coded after
    try:
        if kind == "int":
            codes: Ints = np.array(plain, np.int64)
            if (codes == ABSENT).any():
                return None  # the one int64 the codes keep for None
        elif kind == "float":
            codes = float_codes(np.array(plain, np.float64))
        elif kind == "date":
            codes = np.array([0 if v is None else v.toordinal() - _EPOCH_DAY for v in values], np.int64)
        else:
            zoned = {v.utcoffset() is not None for v in values if v is not None}
            if len(zoned) > 1:
                return None  # aware and naive datetimes do not compare
            kind = "datetime" if zoned.pop() else "naive"
            codes = np.array([0 if v is None else micros(v) for v in values], np.int64)
    except OverflowError:
        return None
    if absent:
        codes[np.fromiter((v is None for v in values), bool, len(values))] = ABSENT
    return kind, codes


def float_codes(numbers: npt.NDArray[np.float64]) -> Ints:
    """Floats as int64 in their order: a negative's magnitude bits flipped (see the module).
    Writes -0.0 as 0.0 into `numbers`."""
    numbers[numbers == 0] = 0.0  # -0.0 == 0.0
    bits = numbers.view(np.int64)
    codes = np.where(bits < 0, bits ^ _FLIP, bits)
    codes[np.isnan(numbers)] = _NAN
    return codes


def decode_values(kind: str | None, codes: Ints) -> list[Any]:
    """The values `encode_values` coded (as equal as Python compares them: -0.0 comes back 0.0,
    a datetime in UTC, every NaN as one)."""
    present = (codes != ABSENT).tolist()
    if kind is None:
        return [None] * len(codes)
    if kind == "int":
        values: list[Any] = codes.tolist()
    elif kind == "float":
        values = np.where(codes < 0, codes ^ _FLIP, codes).view(np.float64).tolist()
    else:
        epoch = _EPOCH if kind == "datetime" else _EPOCH_NAIVE
        make: Callable[[int], Any] = (
            (lambda c: date.fromordinal(c + _EPOCH_DAY)) if kind == "date" else (lambda c: epoch + c * _MICRO)
        )
        values = [make(c) if there else None for c, there in zip(codes.tolist(), present, strict=True)]
    return [v if there else None for v, there in zip(values, present, strict=True)]


def _kind_of(t: type) -> str | None:
    if t is type(None):
        return ""
    if issubclass(t, (int, np.signedinteger)):  # bools too: True == 1, as Python compares them
        return "int"
    if issubclass(t, (float, np.floating)):
        return "float"
    if issubclass(t, datetime):
        return "datetime"
    if issubclass(t, date):
        return "date"
    return None


def only_ints(values: Sequence[Any]) -> bool:
    return all(issubclass(t, (int, np.signedinteger)) for t in set(map(type, values)))


def micros(when: datetime | None) -> int:
    """A load time as microseconds since the epoch (a naive one taken as UTC)."""
    if when is None:
        return int(ABSENT)  # never a holder's root: a followed merge's output takes its load time
    return (when - (_EPOCH_NAIVE if when.utcoffset() is None else _EPOCH)) // _MICRO

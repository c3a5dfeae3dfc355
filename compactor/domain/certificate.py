"""What a rewrite proves about its rows: a fingerprint of what its inputs hold and of what it
wrote, equal or the commit does not happen.

A fingerprint is the row count and the sum, modulo 2^64, of one 64-bit hash per row. A sum does
not depend on the rows' order or on how they are split into files, and it changes when a row is
dropped, written twice or changed (up to a hash collision: about one chance in 2^64 per change).
How a row is hashed lives with the readers (`delta/content/fingerprint.py`); this module only
adds, compares and records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MASK = (1 << 64) - 1
# The row hash: Spark's xxhash64 of every column the reader sees but the segment id, each
# followed by whether it is null (xxhash64 skips nulls), with Spark's seed.
METHOD = "xxhash64-rows-v1"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A multiset of rows, summarised: how many, and their hashes' sum modulo 2^64."""

    rows: int
    digest: int  # 0 <= digest < 2^64

    @classmethod
    def of(cls, rows: int, hash_sum: int) -> Fingerprint:
        """From a row count and an exact (or already wrapped) sum of signed or unsigned hashes."""
        return cls(rows, hash_sum & MASK)

    @classmethod
    def empty(cls) -> Fingerprint:
        return cls(0, 0)

    def __add__(self, other: Fingerprint) -> Fingerprint:
        """The fingerprint of both multisets of rows together."""
        return Fingerprint(self.rows + other.rows, (self.digest + other.digest) & MASK)

    def __str__(self) -> str:
        return f"{self.rows} rows, {self.digest:016x}"

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "digest": f"{self.digest:016x}"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fingerprint:
        """Read back; a field missing or malformed raises ValueError naming it."""
        rows, digest = data.get("rows"), data.get("digest")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
            raise ValueError(f"fingerprint rows {rows!r} is not a row count")
        if not isinstance(digest, str) or len(digest) != 16:
            raise ValueError(f"fingerprint digest {digest!r} is not 16 hexadecimal digits")
        try:
            return cls(rows, int(digest, 16))
        except ValueError:
            raise ValueError(f"fingerprint digest {digest!r} is not 16 hexadecimal digits") from None


def total(parts: Iterable[Fingerprint]) -> Fingerprint:
    """The fingerprint of every part's rows together."""
    found = Fingerprint.empty()
    for part in parts:
        found = found + part
    return found


@dataclass(frozen=True, slots=True)
class Certificate:
    """A rewrite's proof: its inputs' rows as a reader saw them, and the rows it wrote."""

    inputs: Fingerprint
    output: Fingerprint
    method: str = METHOD

    @property
    def holds(self) -> bool:
        return self.inputs == self.output

    def mismatch(self) -> str | None:
        """Why the certificate does not hold, naming both sides; None when it holds."""
        if self.holds:
            return None
        rows = self.output.rows - self.inputs.rows
        counted = (
            f"{abs(rows)} row(s) {'more' if rows > 0 else 'fewer'}"
            if rows
            else "the same row count, different content"
        )
        return f"inputs {self.inputs} but output {self.output}: {counted}"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "inputs": self.inputs.to_dict(), "output": self.output.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Certificate:
        method = data.get("method")
        if not isinstance(method, str):
            raise ValueError(f"certificate method {method!r} is not a name")
        inputs, output = data.get("inputs"), data.get("output")
        if not isinstance(inputs, Mapping) or not isinstance(output, Mapping):
            raise ValueError("a certificate needs its inputs' and its output's fingerprints")
        return cls(Fingerprint.from_dict(inputs), Fingerprint.from_dict(output), method)

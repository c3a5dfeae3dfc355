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


def _difference(first: Fingerprint, then: Fingerprint) -> str:
    rows = then.rows - first.rows
    if not rows:
        return "the same row count, different content"
    return f"{abs(rows)} row(s) {'more' if rows > 0 else 'fewer'}"


# The upsert second opinion's row hash: the key index's (xxhash64 of a row's data columns, the one
# ties are broken by), which is not the certificate's.
WINNERS_METHOD = "xxhash64-winners-v1"


@dataclass(frozen=True, slots=True)
class Winners:
    """An upsert merge's second opinion on which rows it keeps: the winners its inputs hold by the
    key index (kept current load by load in the driver, apart from the merge's own ranking in
    Spark) against the rows the merge kept. A merge that kept a key's loser instead of its winner
    passes the certificate (it wrote what it chose) but fails this."""

    index: Fingerprint  # the keys the inputs win by the index, with the winners' row hashes
    kept: Fingerprint  # the rows the merge kept, hashed as the index hashes them

    @property
    def holds(self) -> bool:
        return self.index == self.kept

    def mismatch(self) -> str | None:
        if self.holds:
            return None
        return (
            f"the key index says the inputs win {self.index} but the merge kept {self.kept}: "
            f"{_difference(self.index, self.kept)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"method": WINNERS_METHOD, "index": self.index.to_dict(), "kept": self.kept.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Winners:
        index, kept = data.get("index"), data.get("kept")
        if not isinstance(index, Mapping) or not isinstance(kept, Mapping):
            raise ValueError("a winners check needs the index's and the kept rows' fingerprints")
        return cls(Fingerprint.from_dict(index), Fingerprint.from_dict(kept))


@dataclass(frozen=True, slots=True)
class IndexedWinners:
    """What an upsert table's key index said, when a merge was handed out, the merge's inputs win
    (`Winners.index`), and the table as the index knew it then: every live segment and its rows.
    A merge whose read finds the table otherwise (a load since, rows deleted since) cannot be
    judged by it, and goes without the winners check."""

    winners: Fingerprint
    segments: Mapping[str, int]  # segment id -> its rows, every live segment the index held

    def applies_to(self, rows_by_segment: Mapping[str, int | None]) -> bool:
        """Does the table a merge read (its segments' visible rows) match what the index knew?"""
        return dict(rows_by_segment) == dict(self.segments)


@dataclass(frozen=True, slots=True)
class Certificate:
    """A rewrite's proof: its inputs' rows as a reader saw them, and the rows it wrote; for an
    upsert merge checked against its key index, that second opinion too (`Winners`)."""

    inputs: Fingerprint
    output: Fingerprint
    method: str = METHOD
    winners: Winners | None = None

    @property
    def holds(self) -> bool:
        return self.inputs == self.output and (self.winners is None or self.winners.holds)

    def mismatch(self) -> str | None:
        """Why the certificate does not hold, naming both sides; None when it holds."""
        found = []
        if self.inputs != self.output:
            found.append(
                f"inputs {self.inputs} but output {self.output}: {_difference(self.inputs, self.output)}"
            )
        if self.winners is not None and not self.winners.holds:
            found.append(str(self.winners.mismatch()))
        return "; ".join(found) or None

    def to_dict(self) -> dict[str, Any]:
        """The certificate as events carry it (`merge_result.avsc`: no winners check)."""
        return {"method": self.method, "inputs": self.inputs.to_dict(), "output": self.output.to_dict()}

    def to_metadata(self) -> dict[str, Any]:
        """The certificate as a commit's metadata records it: with the winners check, if any."""
        extra = {"winners": self.winners.to_dict()} if self.winners is not None else {}
        return self.to_dict() | extra

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Certificate:
        method = data.get("method")
        if not isinstance(method, str):
            raise ValueError(f"certificate method {method!r} is not a name")
        inputs, output, winners = data.get("inputs"), data.get("output"), data.get("winners")
        if not isinstance(inputs, Mapping) or not isinstance(output, Mapping):
            raise ValueError("a certificate needs its inputs' and its output's fingerprints")
        if winners is not None and not isinstance(winners, Mapping):
            raise ValueError(f"certificate winners {winners!r} is not a record")
        checked = Winners.from_dict(winners) if winners is not None else None
        return cls(Fingerprint.from_dict(inputs), Fingerprint.from_dict(output), method, checked)

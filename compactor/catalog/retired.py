"""What is kept of a merged-away segment: enough to tell an exact re-delivery of its event from a
producer that reuses its id for other data.

Every retired segment keeps its time range, record count and a fingerprint in
the durable catalog. In memory the job keeps a Bloom filter of retired ids per
table (about ten bits per id), so start-up does not read the history: a
completion event whose id the filter may hold is checked against the stored
record; one it cannot hold is new. Besides the filter it keeps the newest
records themselves (`Newest`, `RETIRED_KEPT` of them): what the job merged a
moment ago is asked of memory, not of the store.
"""

from __future__ import annotations

import hashlib
import struct
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from rbloom import Bloom

from compactor.domain.segments import Segment, TimeRange

_FALSE_POSITIVES = 0.01
_FIRST_CAPACITY = 1024

# The newest retired records the catalog keeps in memory, over all its tables (about 400 bytes
# each: 6.5 MB). Older ones are the durable store's (`CatalogStore.retired`, `merged_by`), asked
# when the filter may hold the id. What reads them soon after a merge (a replayed batch, the
# commit's own fold at the save, a key index following the merge) finds them here: at 5 merges a
# second retiring three segments each, the last 18 minutes. (65,536 kept a years run's every
# record, 26 MB filling over 30,000 merges.)
RETIRED_KEPT = 16_384


def fingerprint(segment: Segment) -> str:
    """A segment's identity as its completion event announced it: id, range, records, values."""
    text = "\x1f".join(
        [
            segment.table,
            segment.id,
            segment.start.isoformat(),
            segment.end.isoformat(),
            str(segment.records),
            ",".join(sorted(segment.sub_partitions)),
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class RetiredSegment:
    """A segment merged away: its range, records and fingerprint, and the plan that merged it."""

    table: str
    segment_id: str
    range: TimeRange
    records: int
    fingerprint: str
    retired_by: str | None = None

    @classmethod
    def of(cls, segment: Segment, plan_id: str | None) -> RetiredSegment:
        return cls(segment.table, segment.id, segment.range, segment.records, fingerprint(segment), plan_id)

    def same_event(self, segment: Segment) -> bool:
        """Does `segment` announce exactly what this id announced before? A segment the
        catalog never had described (no fingerprint) cannot be told apart: it counts as the same."""
        return not self.fingerprint or self.fingerprint == fingerprint(segment)


def _hash(item: str) -> int:
    digest = hashlib.blake2b(item.encode(), digest_size=16).digest()
    return int.from_bytes(digest, "big", signed=True)  # rbloom wants a stable signed 128-bit hash


class RetiredFilter:
    """A scalable Bloom filter of retired ids: a new filter of twice the size when one fills up."""

    def __init__(self, layers: list[tuple[int, int, Bloom]] | None = None) -> None:
        self._layers = layers or []  # (capacity, count, filter)

    def add(self, segment_id: str) -> None:
        if not self._layers or self._layers[-1][1] >= self._layers[-1][0]:
            capacity = 2 * self._layers[-1][0] if self._layers else _FIRST_CAPACITY
            self._layers.append((capacity, 0, Bloom(capacity, _FALSE_POSITIVES, _hash)))
        capacity, count, bloom = self._layers[-1]
        bloom.add(segment_id)
        self._layers[-1] = (capacity, count + 1, bloom)

    def might_contain(self, segment_id: str) -> bool:
        return any(segment_id in bloom for _, _, bloom in self._layers)

    def __len__(self) -> int:
        return sum(count for _, count, _ in self._layers)

    def to_bytes(self) -> bytes:
        parts = [struct.pack(">I", len(self._layers))]
        for capacity, count, bloom in self._layers:
            data = bloom.save_bytes()
            parts.append(struct.pack(">QQI", capacity, count, len(data)) + data)
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | None) -> RetiredFilter:
        if not data:
            return cls()
        data = bytes(data)  # Spark and the journal hand binary columns back as bytearray
        (layers,), offset = struct.unpack_from(">I", data), 4
        found = []
        for _ in range(layers):
            capacity, count, size = struct.unpack_from(">QQI", data, offset)
            offset += 20
            found.append((capacity, count, Bloom.load_bytes(data[offset : offset + size], _hash)))
            offset += size
        return cls(found)


V = TypeVar("V")


class Newest(Generic[V]):
    """At most `limit` values by (table, id), over all tables: the oldest added leave first.
    Setting a value kept already keeps its place."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tables: dict[str, dict[str, V]] = {}
        self._order: deque[tuple[str, str]] = deque()  # one entry per value kept, oldest first

    def __len__(self) -> int:
        return len(self._order)

    def set(self, table: str, key: str, value: V) -> None:
        kept = self._tables.setdefault(table, {})
        if key not in kept:
            self._order.append((table, key))
        kept[key] = value
        while len(self._order) > self.limit:
            old_table, old_key = self._order.popleft()
            held = self._tables[old_table]
            del held[old_key]
            if not held:
                del self._tables[old_table]

    def get(self, table: str, key: str) -> V | None:
        return self._tables.get(table, {}).get(key)

    def has(self, table: str, key: str) -> bool:
        return key in self._tables.get(table, {})

    def keys(self, table: str) -> frozenset[str]:
        return frozenset(self._tables.get(table, ()))

    def values(self, table: str) -> Iterator[V]:
        return iter(list(self._tables.get(table, {}).values()))

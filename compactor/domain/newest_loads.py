"""A table's most recently loaded segments, kept in order as segments come and go.

`preserve_latest` keeps a table's newest loads out of every merge. Finding them by
sorting the table costs O(n log n) per attempt at a million segments; this keeps a
short sorted list instead, which is always exactly the newest of the table: a new
segment joins it when it is newer than the oldest kept, a removed one leaves it (the
rest are still the newest of what is left), and only a request for more than it holds
rebuilds it, from a partition of the load times.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from compactor.domain.segments import Segment

SLACK = 64  # kept beyond the most asked for, so a few more (near attempts) rarely rebuild


class NewestLoads:
    def __init__(self) -> None:
        self._entries: list[tuple[float, str]] = []  # (loaded, id), oldest first: the table's newest
        self._cap = 0  # how many are kept (grown to what is asked for, plus the slack)

    def ids(self, n: int, loaded: npt.NDArray[np.float64], segments: Sequence[Segment]) -> list[str]:
        """Ids of the `n` newest (ties by id), oldest of them first, of the table whose rows
        hold `segments` loaded at `loaded` (read only to rebuild)."""
        if n <= 0:
            return []
        if n > len(self._entries) and len(self._entries) < len(segments):
            self._rebuild(n + SLACK, loaded, segments)
        return [sid for _, sid in self._entries[-n:]]

    def added(self, loaded: float, segment_id: str, table_size: int) -> None:
        """A segment joined the table (now of `table_size`)."""
        entry = (loaded, segment_id)
        whole = len(self._entries) == table_size - 1  # they were the whole table before
        if whole or (self._entries and entry > self._entries[0]):
            insort(self._entries, entry)
            if len(self._entries) > self._cap:
                del self._entries[0]  # still exactly the newest, one fewer

    def removed(self, loaded: float, segment_id: str) -> None:
        """A segment left the table."""
        if self._entries and (loaded, segment_id) >= self._entries[0]:
            self._entries.remove((loaded, segment_id))

    def _rebuild(self, keep: int, loaded: npt.NDArray[np.float64], segments: Sequence[Segment]) -> None:
        rows = np.arange(len(loaded))
        if keep < len(loaded):
            kth = np.partition(loaded, len(loaded) - keep)[len(loaded) - keep]
            rows = np.flatnonzero(loaded >= kth)  # ties at the cut all come: ids settle them
        entries = sorted((float(loaded[r]), segments[r].id) for r in rows.tolist())
        self._entries, self._cap = entries[-keep:], keep

"""Each table's next due time, kept in a heap ordered by time.

After every attempt the planner sets the table's due time from its segments and
settings (`rules.due`) and its cool-downs; a failure's cool-down lowers it. A tick
pops what is due: with nothing due it looks at the top of the heap and nothing
else, however many tables there are. Nothing here is persisted: a restart makes
every table due at once (what was in flight is planned again), and each attempt
derives the next due time afresh.
"""

from __future__ import annotations

import heapq
import itertools
from datetime import datetime

from compactor.rules.due import Due


class DueTimes:
    def __init__(self) -> None:
        self._heap: list[tuple[datetime, int, str]] = []
        self._current: dict[str, tuple[int, Due]] = {}  # table -> (entry number, due)
        self._computed: dict[str, datetime] = {}  # when each table's due time was last derived
        self._numbers = itertools.count()

    def set(self, table: str, due: Due | None, computed_at: datetime) -> None:
        """The table's due time as derived at `computed_at` (None: nothing comes due with time)."""
        self._computed[table] = computed_at
        if due is None:
            self._current.pop(table, None)
            return
        number = next(self._numbers)
        self._current[table] = (number, due)
        heapq.heappush(self._heap, (due.at, number, table))

    def lower(self, table: str, due: Due | None) -> None:
        """Make the table due at `due` if that is sooner than what it has."""
        current = self.get(table)
        if due is not None and (current is None or due.at < current.at):
            number = next(self._numbers)
            self._current[table] = (number, due)
            heapq.heappush(self._heap, (due.at, number, table))

    def get(self, table: str) -> Due | None:
        found = self._current.get(table)
        return None if found is None else found[1]

    def computed_at(self, table: str) -> datetime | None:
        return self._computed.get(table)

    def next_at(self) -> datetime | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: datetime, limit: int | None = None) -> list[tuple[str, Due]]:
        """The tables due at `now` (at most `limit`, soonest first); they are due no more until
        their next attempt sets them again."""
        found: list[tuple[str, Due]] = []
        while (limit is None or len(found) < limit) and self.next_at() is not None:
            at, _, table = self._heap[0]
            if at > now:
                break
            heapq.heappop(self._heap)
            found.append((table, self._current.pop(table)[1]))
        return found

    def forget(self, table: str) -> None:
        self._current.pop(table, None)
        self._computed.pop(table, None)

    def _drop_stale(self) -> None:
        """Heap entries a later `set` or `lower` replaced go when they reach the top."""
        while self._heap:
            _, number, table = self._heap[0]
            current = self._current.get(table)
            if current is not None and current[0] == number:
                return
            heapq.heappop(self._heap)

    def __len__(self) -> int:
        return len(self._current)

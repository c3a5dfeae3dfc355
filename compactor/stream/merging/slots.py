"""The job's merge slots: one account for every shard and every Spark pool, with each table's
turn following the merge time it used."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

OCCUPATION_WINDOW_S = 600.0  # merge time counts toward a table's occupation this long


class Slots:
    """The job's merge slots: one account for every shard it runs and every Spark pool.

    At most `limit` merges run at once, and a pool with a concurrency (the replicas of a
    Hydrolix merge pool, a rule's `cores_while_compacting`) at most that many of its own.
    Checking for a free slot and taking it is one step under one lock (`try_take`), so two
    shards never both take the last one.

    Which table gets a free slot follows its **occupation** (Apache Amoro's measure): the merge
    time it used over the last `window` seconds (its running merges' time so far included),
    divided by its `quota` (default 1: equal shares). Each shard says which tables it has a
    merge ready for (`demand`); a slot goes to one of the tables with the lowest occupation, and
    a shard whose table would pass another shard's lower one waits for that one to take its
    turn. A freed slot wakes every shard (`wake`), not only the one whose merge ended.
    """

    def __init__(
        self,
        limit: int,
        concurrency: Callable[[str], int | None],
        quota: Callable[[str], float] = lambda table: 1.0,
        clock: Callable[[], float] = time.monotonic,
        window: float = OCCUPATION_WINDOW_S,
    ) -> None:
        self.limit = limit
        self.concurrency = concurrency  # a Spark pool's own limit (None: any free slot)
        self.quota = quota
        self.clock = clock
        self.window = window
        self._taken: dict[str, tuple[str | None, str, float]] = {}  # plan id -> pool, table, since
        self._used: dict[str, deque[tuple[float, float]]] = {}  # table -> (started, ended) of its merges
        self._demand: dict[int, dict[str, str | None]] = {}  # shard -> table -> its next plan's pool
        self._wakers: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def free(self) -> int:
        with self._lock:
            return max(0, self.limit - len(self._taken))

    def on_free(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake` whenever a slot is given back (a shard's ticker then looks for its turn).
        Returns what stops it: a stopped shard's waker, kept, would keep its whole state alive."""
        with self._lock:
            self._wakers.append(wake)

        def forget() -> None:
            with self._lock:
                if wake in self._wakers:
                    self._wakers.remove(wake)

        return forget

    def listeners(self) -> int:
        """How many shards are woken when a slot comes free."""
        with self._lock:
            return len(self._wakers)

    def demand(self, shard: int, tables: Mapping[str, str | None]) -> None:
        """The tables `shard` has a merge ready to start for (table -> that merge's pool)."""
        with self._lock:
            if tables:
                self._demand[shard] = dict(tables)
            else:
                self._demand.pop(shard, None)

    def occupation(self, table: str) -> float:
        with self._lock:
            return self._occupation(table, self.clock())

    def blocked(self, pool: str | None) -> str | None:
        """Why no merge of `pool` can start now (None: it can)."""
        with self._lock:
            return self._blocked(pool)

    def try_take(self, plan_id: str, table: str, pool: str | None, shard: int = 0) -> str | None:
        """Take a slot for the plan if one is free, its pool has room and no other shard has a
        table waiting with a lower occupation; else why not. One step: nothing can take the
        slot between the look and the take."""
        with self._lock:
            why = self._blocked(pool)
            if why is not None:
                return why
            now = self.clock()
            mine = self._occupation(table, now)
            for other, tables in self._demand.items():
                if other == shard:
                    continue
                for waiting, its_pool in tables.items():
                    if self._blocked(its_pool) is None and self._occupation(waiting, now) < mine - 1e-9:
                        return f"table {waiting} of shard {other} has used less of its share"
            self._taken[plan_id] = (pool, table, now)
        return None

    def give(self, plan_id: str) -> None:
        with self._lock:
            found = self._taken.pop(plan_id, None)
            if found is not None:
                _, table, since = found
                self._used.setdefault(table, deque()).append((since, self.clock()))
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def running(self) -> int:
        with self._lock:
            return len(self._taken)

    def _blocked(self, pool: str | None) -> str | None:
        if len(self._taken) >= self.limit:
            return f"all {self.limit} merge slots are busy"
        cap = self.concurrency(pool) if pool is not None else None
        in_pool = sum(1 for p, _, _ in self._taken.values() if p == pool)
        if cap is not None and in_pool >= cap:
            return f"pool {pool} runs {in_pool} of its {cap} merges"
        return None

    def _occupation(self, table: str, now: float) -> float:
        """Merge seconds of `table` in the window (running merges so far), over its quota."""
        since = now - self.window
        used = self._used.get(table)
        while used and used[0][1] < since:
            used.popleft()
        seconds = sum(end - max(start, since) for start, end in used or ())
        seconds += sum(now - max(at, since) for _, t, at in self._taken.values() if t == table)
        return seconds / max(self.quota(table), 1e-9)

"""Fair share across tables: deficit round-robin over the tables with merges waiting.

Used when a micro-batch may run only so many merges (`operations.max_merges_per_batch`).
Tables are visited in a fixed order; each visit adds the table's quantum to its
deficit, and the table runs merges (one unit each) while its deficit covers one.
A table's quantum is its weight over the largest weight, but never below 1/N
for N tables with merges waiting: the heaviest table runs a merge every round,
and any table within N rounds, however small its weight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from compactor.domain.plans import MergePlan
from compactor.stream.triggers import Trigger

INLINE_ORIGINS = frozenset({"request", "control"})  # an operator's request runs at once


class FairShare:
    def __init__(self) -> None:
        self._deficit: dict[str, float] = {}
        self._current: str | None = None
        self.rounds = 0  # full passes over the waiting tables (for tests and metrics)

    def pick(self, weights: Mapping[str, float]) -> str:
        """The table whose merge runs next, among `weights` (the tables with merges waiting,
        each weighted by priority x its share of the debt; at least one)."""
        if not weights:
            raise ValueError("no table has a merge waiting")
        tables = sorted(weights)
        self._deficit = {t: d for t, d in self._deficit.items() if t in weights}
        top = max(weights.values())
        floor = 1 / len(tables)
        while True:  # deficits are compared with a tolerance: 3 x 1/3 makes 1
            current = self._current
            if current is not None and current in weights and self._deficit.get(current, 0.0) >= 1 - 1e-9:
                self._deficit[current] -= 1
                return current
            after = [t for t in tables if current is None or t > current]
            if not after:
                self.rounds += 1
            nxt = after[0] if after else tables[0]
            quantum = max(weights[nxt] / top if top > 0 else 0.0, floor)
            self._deficit[nxt] = self._deficit.get(nxt, 0.0) + quantum
            self._current = nxt


@dataclass
class BatchMerges:
    """The merges of one micro-batch when it may run only `limit` of them.

    Attempts queue their plans per table instead of running them at once; after the
    batch's events, the queue runs in fair-share order (weight: the table's priority x
    its share of the waiting bytes) up to the limit. Tables left with plans are owed an
    attempt in the next batch, which the merges just run start with their own events.
    Without a limit (the default) every plan runs as its attempt makes it.
    """

    limit: int | None
    priority: Callable[[str], float]
    fair: FairShare = field(default_factory=FairShare)
    _queued: dict[str, dict[str, MergePlan]] = field(default_factory=dict)
    _owed: set[str] = field(default_factory=set)

    def take(self, trigger: Trigger, plans: list[MergePlan]) -> list[MergePlan]:
        """The plans to run now; the others are queued for `drain`."""
        if self.limit is None or trigger.origin in INLINE_ORIGINS:
            return plans
        queued = self._queued.setdefault(trigger.table, {})
        queued.update((p.plan_id, p) for p in plans)
        if not queued:
            del self._queued[trigger.table]
        return []

    def drain(self) -> Iterator[MergePlan]:
        """Up to `limit` queued plans, in fair-share order; the rest are dropped and their
        tables owed an attempt."""
        left = self.limit or 0
        while self._queued and left > 0:
            waiting = {t: sum(p.bytes_in for p in q.values()) for t, q in self._queued.items()}
            total = sum(waiting.values())
            share = {t: size / total if total else 1 / len(waiting) for t, size in waiting.items()}
            table = self.fair.pick({t: self.priority(t) * share[t] for t in waiting})
            queued = self._queued[table]
            yield queued.pop(next(iter(queued)))
            if not queued:
                del self._queued[table]
            left -= 1
        self._owed |= set(self._queued)
        self._queued.clear()

    def owed(self) -> list[str]:
        """Tables whose plans a batch's limit left over: attempt them again (and forget them)."""
        owed, self._owed = sorted(self._owed), set()
        return owed

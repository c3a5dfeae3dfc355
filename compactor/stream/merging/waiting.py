"""Fair share across tables: deficit round-robin over the tables with merges waiting.

Used when merges wait for a slot (`operations.max_concurrent_merges`) or a round may start
only so many (`operations.max_merges_per_batch`).
Tables are visited in a fixed order; each visit adds the table's quantum to its
deficit, and the table runs merges (one unit each) while its deficit covers one.
A table's quantum is its weight over the largest weight, but never below 1/N
for N tables with merges waiting: the heaviest table runs a merge every round,
and any table within N rounds, however small its weight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from compactor.domain.plans import MergePlan

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
class WaitingPlans:
    """Plans made but not started: they wait for a merge slot, in fair-share order across tables.

    Each attempt of a table replaces what it left waiting (the latest evaluation of the
    table's segments is the one to run). Slots go to the tables by deficit round-robin
    (weight: the table's priority x its share of the waiting bytes), and within a table in
    the order its rules made the plans. `per_round` caps how many start in one round (a
    batch or a tick: `operations.max_merges_per_batch`); the rest wait for the next.
    """

    priority: Callable[[str], float]
    per_round: int | None = None
    fair: FairShare = field(default_factory=FairShare)
    _plans: dict[str, dict[str, MergePlan]] = field(default_factory=dict)

    def offer(self, table: str, plans: Iterable[MergePlan], whole: bool = True) -> None:
        """The table's plans from its latest attempt. `whole`: the attempt looked at all of the
        table's segments and every rule, so its plans replace those waiting; an attempt that
        looked only near an event (or ran one rule) adds to them, keeping each waiting plan
        none of whose inputs a new plan takes (the rest of the table was not looked at, so
        nothing there was found stale; a plan that is stale when it starts is planned again)."""
        found = {p.plan_id: p for p in plans}
        if not whole:
            taken = {sid for p in found.values() for sid in p.input_ids}
            kept = (p for p in self._plans.get(table, {}).values() if taken.isdisjoint(p.input_ids))
            found |= {p.plan_id: p for p in kept if p.plan_id not in found}
        if found:
            self._plans[table] = found
        else:
            self._plans.pop(table, None)

    def drop_taking(self, table: str, segment_ids: Iterable[str]) -> None:
        """Forget the table's waiting plans that take any of these segments (merged away now)."""
        gone = set(segment_ids)
        left = {k: p for k, p in self._plans.get(table, {}).items() if gone.isdisjoint(p.input_ids)}
        self.offer(table, left.values())

    def put_back(self, plan: MergePlan) -> None:
        """A plan taken from the queue that could not start after all: first in its table's line."""
        self._plans[plan.table] = {plan.plan_id: plan, **self._plans.get(plan.table, {})}

    def ready(self, startable: Callable[[MergePlan], bool]) -> list[MergePlan]:
        """Each table's first plan that can start now."""
        found = (next((p for p in q.values() if startable(p)), None) for q in self._plans.values())
        return [p for p in found if p is not None]

    def drop(self, table: str) -> bool:
        """Forget the table's waiting plans (they may be stale); True if it had any."""
        return self._plans.pop(table, None) is not None

    def tables(self) -> list[str]:
        return sorted(self._plans)

    def waiting(self, table: str) -> list[MergePlan]:
        return list(self._plans.get(table, {}).values())

    def next_round(
        self,
        startable: Callable[[MergePlan], bool],
        room: Callable[[], int],
        limit: int | None = None,
        occupation: Callable[[str], float] = lambda table: 0.0,
    ) -> Iterator[MergePlan]:
        """Plans to start now, in fair-share order, each `startable`, while there is `room` and
        fewer than `limit` started; a yielded plan leaves the queue (`put_back` returns it). The
        tables whose occupation (merge time used over their quota) is lowest go first; among
        equals, deficit round-robin. A table none of whose plans can start sits this round out."""
        started, out = 0, set[str]()
        while room() > 0 and (limit is None or started < limit):
            candidates = {t: q for t, q in self._plans.items() if t not in out}
            if not candidates:
                return
            used = {t: occupation(t) for t in candidates}
            least = min(used.values())
            candidates = {t: q for t, q in candidates.items() if used[t] <= least + 1e-9}
            waiting = {t: sum(p.bytes_in for p in q.values()) for t, q in candidates.items()}
            total = sum(waiting.values())
            share = {t: size / total if total else 1 / len(waiting) for t, size in waiting.items()}
            table = self.fair.pick({t: self.priority(t) * share[t] for t in waiting})
            plan = next((p for p in candidates[table].values() if startable(p)), None)
            if plan is None:
                out.add(table)
                continue
            queued = self._plans[table]
            del queued[plan.plan_id]
            if not queued:
                del self._plans[table]
            started += 1
            yield plan

"""A write-amplification budget: bytes rewritten by merges over bytes ingested, per table, over a
sliding window (`max_write_amplification`).

Merges are required or optional. Required ones keep the number of unmerged
segments of an open window bounded, and always run; optional ones improve an
already bounded layout, and run only while their bytes fit what the budget has
left (budget x bytes ingested - bytes rewritten, over the window):

- time layers: merges at the smallest level are required (an open bucket of the
  smallest level holds at most its own loads), and so are folds of late data (they
  bound a bucket's late run); larger levels are optional;
- level thresholds: level-1 merges are required, level-2 merges optional;
- bin packing: bins of the first pool (fresh loads) are required, the later
  pools' optional;
- size threshold, upsert compaction, refresh and manual merges are required.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from compactor.config.rules import AutoMergeRule, BinPackRule, MinorRule, RuleConfig
from compactor.domain.calendar import largest_first
from compactor.domain.plans import MergePlan
from compactor.rules.late_data import is_fold

WA_WINDOW = timedelta(days=30)
WINDOW_SLOTS = 720  # buckets a sliding window is kept in: an hour each over 30 days


def optional(plan: MergePlan, rule: RuleConfig) -> bool:
    """True when the budget may defer `plan` (see the module)."""
    if isinstance(rule, AutoMergeRule):  # a fold bounds a bucket's late run: required
        return not is_fold(plan) and plan.level != str(largest_first(rule.levels)[-1])
    if isinstance(rule, MinorRule):
        return plan.level == "level-2"
    if isinstance(rule, BinPackRule):
        return plan.pool != rule.pools[0].name
    return False


@dataclass
class Admitted:
    """A rule's plans after the budget: those that run (in order) and those deferred."""

    kept: list[MergePlan]
    deferred: list[MergePlan]
    allowance: float  # bytes the budget has left after the kept plans


def admit(plans: Sequence[MergePlan], rule: RuleConfig, allowance: float) -> Admitted:
    """Required plans always; optional ones in order while their input bytes fit `allowance`."""
    kept, deferred = [], []
    for plan in plans:
        fits = plan.bytes_in <= allowance
        if optional(plan, rule) and not fits:
            deferred.append(plan)
            continue
        kept.append(plan)
        allowance -= plan.bytes_in
    return Admitted(kept, deferred, allowance)


class SlidingTotals:
    """Sizes noted per table with their time; their total and count over the last `window`.

    Kept in `slots` buckets of `window / slots` each, so memory is bounded by the tables and the
    slots whatever the rate (one entry a load held a 30-day window's loads: millions at a busy
    job's rate). A bucket counts while part of it lies in the window, so a total may include up to
    one bucket's width (1/slots of the window) more than the window. Thread-safe: the batch thread
    adds, the metrics scrape reads."""

    def __init__(self, window: timedelta, slots: int = WINDOW_SLOTS) -> None:
        self.window = window
        self.slots = slots
        self._width = window.total_seconds() / slots
        self._buckets: dict[str, dict[int, list[int]]] = {}  # table -> slot -> [total, count]
        self._lock = threading.Lock()

    def add(self, table: str, at: datetime, size: int) -> None:
        slot = self._slot(at)
        with self._lock:
            buckets = self._buckets.setdefault(table, {})
            bucket = buckets.setdefault(slot, [0, 0])
            bucket[0] += size
            bucket[1] += 1
            if len(buckets) > self.slots + 1:  # a table nobody reads still keeps one window
                self._drop_before(buckets, max(buckets) - self.slots)

    def total(self, table: str, now: datetime) -> int:
        with self._lock:
            return sum(total for total, _ in self._recent(table, now))

    def count(self, table: str, now: datetime) -> int:
        with self._lock:
            return sum(count for _, count in self._recent(table, now))

    def buckets(self, table: str) -> int:
        """Buckets kept for `table` (the bound: `slots` + 1)."""
        with self._lock:
            return len(self._buckets.get(table, {}))

    def _slot(self, at: datetime) -> int:
        return math.floor(at.timestamp() / self._width)

    def _recent(self, table: str, now: datetime) -> list[list[int]]:
        buckets = self._buckets.get(table, {})
        self._drop_before(buckets, self._slot(now - self.window))
        return list(buckets.values())

    @staticmethod
    def _drop_before(buckets: dict[int, list[int]], cut: int) -> None:
        for slot in [s for s in buckets if s < cut]:
            del buckets[slot]


@dataclass
class WriteLedger:
    """Bytes ingested and bytes rewritten per table over the last `window`."""

    window: timedelta = WA_WINDOW
    _ingested: SlidingTotals = field(init=False)
    _rewritten: SlidingTotals = field(init=False)

    def __post_init__(self) -> None:
        self._ingested, self._rewritten = SlidingTotals(self.window), SlidingTotals(self.window)

    def ingested(self, table: str, at: datetime, size: int) -> None:
        self._ingested.add(table, at, size)

    def rewritten(self, table: str, at: datetime, size: int) -> None:
        self._rewritten.add(table, at, size)

    def amplification(self, table: str, now: datetime) -> float:
        """Rewritten over ingested bytes in the window (0: nothing rewritten; inf: no ingest)."""
        rewritten, ingested = self._rewritten.total(table, now), self._ingested.total(table, now)
        if rewritten == 0:
            return 0.0
        return rewritten / ingested if ingested else math.inf

    def allowance(self, table: str, now: datetime, budget: float | None) -> float | None:
        """Bytes optional merges may still rewrite (None: the table has no budget)."""
        if budget is None:
            return None
        return budget * self._ingested.total(table, now) - self._rewritten.total(table, now)

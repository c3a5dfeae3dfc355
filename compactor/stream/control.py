"""The control state planning reads besides the catalog: recent ingest, the write-amplification
ledger, the debt each table's latest evaluation found and its trend, and how far behind the job is.

It lives with the stream, not with the metrics: the planner decides with it, and
since merges run on several threads, it is written from more than one. The
metrics only read it at scrape time (`observe.metrics`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from compactor.domain.events import MergeResult, MergeStatus
from compactor.domain.plans import MergePlan
from compactor.domain.segments import Segment
from compactor.rules.budget import WriteLedger
from compactor.stream.debt_trend import DebtTrend, IngestWindow, Outlook, Reading

KEEPING_UP_LAG = 1000  # events behind on the segments topic, above which the job is not keeping up


@dataclass(frozen=True, slots=True)
class Debt:
    """What the rules would merge now on one table (from its latest evaluation)."""

    candidates: int  # plans
    segments: int  # their inputs
    bytes: int
    oldest_loaded_at: datetime | None


class Control:
    """Per-table ingest, rewrites, debt and its trend, and the job's lag; thread-safe."""

    def __init__(self) -> None:
        self.ingest = IngestWindow()
        self.writes = WriteLedger()  # for write-amplification budgets
        self.trend = DebtTrend()
        self.deferring = False  # optional merges wait: the job is too far behind (admission control)
        self._lock = threading.Lock()
        self._debt: dict[str, dict[str, tuple[Segment, ...]]] = {}  # table -> plan id -> inputs
        self._lag: float | None = None  # events behind, as the query's last progress said
        self._running: dict[str, int] = {}  # table -> merges in flight
        self._waiting: dict[str, str] = {}  # table -> why its ready merges have not started

    def on_started(self, table: str) -> None:
        with self._lock:
            self._running[table] = self._running.get(table, 0) + 1

    def on_finished(self, table: str) -> None:
        with self._lock:
            left = self._running.get(table, 0) - 1
            if left > 0:
                self._running[table] = left
            else:
                self._running.pop(table, None)

    def on_waiting(self, reasons: dict[str, str]) -> None:
        """Why each table with merges ready has not started them (replaces the last report)."""
        with self._lock:
            self._waiting = dict(reasons)

    def activity(self, table: str) -> tuple[int, str | None]:
        """(merges in flight, why its ready merges wait) for the table's status word."""
        with self._lock:
            return self._running.get(table, 0), self._waiting.get(table)

    def on_load(self, segment: Segment, now: datetime) -> None:
        self.ingest.add(segment.table, segment.bytes, now)
        self.writes.ingested(segment.table, now, segment.bytes)

    def on_merged(self, result: MergeResult, now: datetime) -> None:
        """A plan's result: a committed one is no longer debt, and its inputs were rewritten."""
        if result.status is not MergeStatus.SUCCEEDED:
            return
        plan = result.plan
        with self._lock:
            self._debt.get(plan.table, {}).pop(plan.plan_id, None)
        self.writes.rewritten(plan.table, now, result.bytes_in)

    def on_evaluation(self, table: str, plans: tuple[MergePlan, ...], full: bool = True) -> None:
        """The latest evaluation of a table's rules: what is ready to merge (its debt). A full
        one replaces what earlier ones found; one near an event's segment adds to it."""
        found = {p.plan_id: p.inputs for p in plans}
        with self._lock:
            if full:
                self._debt[table] = found
            else:
                self._debt.setdefault(table, {}).update(found)

    def read_debt(self, table: str, at: datetime) -> None:
        """Read the table's debt into its trend (drain rate, ETA, stuck): after an attempt's
        merges started, so that a merge made at once is not debt."""
        debt = self.debt(table)
        keeping_up = self._lag is None or self._lag <= KEEPING_UP_LAG
        self.trend.add(table, Reading(at, debt.bytes, debt.segments, keeping_up))

    def outlook(self, table: str, now: datetime, max_debt: timedelta | None) -> Outlook | None:
        """Where the table's debt stands and goes (None before its first evaluation)."""
        return self.trend.outlook(table, self.ingest.bytes_per_hour(table, now), max_debt)

    def on_lag(self, events: float | None) -> None:
        """The query's latest lag; None when its progress could not tell (then not "behind")."""
        self._lag = events

    @property
    def lag(self) -> float | None:
        """Events behind on the segments topic, as the query's last progress said (None: unknown)."""
        return self._lag

    def debt_inputs(self, table: str) -> list[tuple[Segment, ...]]:
        """The inputs of the table's ready plans that have not committed since its latest evaluation."""
        with self._lock:
            return list(self._debt.get(table, {}).values())

    def debt(self, table: str) -> Debt:
        """The table's ready plans that have not committed since its latest evaluation."""
        plans = self.debt_inputs(table)
        inputs = [s for p in plans for s in p]
        return Debt(
            candidates=len(plans),
            segments=len(inputs),
            bytes=sum(s.bytes for s in inputs),
            oldest_loaded_at=min((s.loaded_at for s in inputs), default=None),
        )

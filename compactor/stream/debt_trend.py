"""Merge debt as a service level: how fast a table's debt drains, when it will be paid, whether
it is stuck, and how it stands against the table's objective (`max_debt`).

Pure: the stream feeds one `Reading` per evaluation of a table's rules; the
metrics, the summary line and `compactor status` read the `Outlook`.

- Debt is what the rules would merge now (bytes and segments of the ready plans).
- Drain rate is the net fall of that debt per hour: minus the least-squares slope
  of the readings over the last `window`. Net, because ingest keeps adding debt
  while merges pay it; positive while the debt falls.
- ETA = debt / drain rate, when the debt falls.
- Stuck: over the last `stuck_after` readings, all taken while the job kept up
  with its events, the debt never fell below where it was `stuck_after` readings ago.
- Objective: with `max_debt` (hours of ingest), breached above it; at risk above
  half of it, or when the ETA is longer than it, or when stuck; else met.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from compactor.rules.budget import SlidingTotals

INGEST_WINDOW = timedelta(hours=24)  # the recent ingest rate that debt is measured against
DEFAULT_WINDOW = timedelta(minutes=15)
DEFAULT_STUCK_AFTER = 10  # readings
_KEEP = 512  # readings kept per table at most, however often it is read within the window


class Objective(StrEnum):
    MET = "met"
    AT_RISK = "at_risk"
    BREACHED = "breached"


@dataclass(frozen=True, slots=True)
class Reading:
    """One evaluation's debt on one table."""

    at: datetime
    bytes: int
    segments: int
    keeping_up: bool = True  # the job was not behind on its events (it had room to merge)


@dataclass(frozen=True, slots=True)
class Outlook:
    """Where one table's debt stands and goes."""

    bytes: int
    segments: int
    ingest_hours: float  # the debt in hours of recent ingest (inf: debt and no ingest)
    drain_bytes_per_hour: float  # net; 0 when not known (fewer than two readings)
    eta: timedelta | None  # until the debt is paid at the drain rate; None while it does not fall
    stuck: bool
    objective: Objective | None  # None: the table has no max_debt

    def gauges(self) -> dict[str, float]:
        """The per-table gauges the metrics scrape exports."""
        return {
            "compactor_debt_drain_bytes_per_hour": self.drain_bytes_per_hour,
            "compactor_debt_eta_seconds": math.inf if self.eta is None else self.eta.total_seconds(),
            "compactor_debt_stuck": 1.0 if self.stuck else 0.0,
        }

    def to_json(self) -> dict[str, object]:
        return {
            "debt_bytes": self.bytes,
            "debt_segments": self.segments,
            "debt_ingest_hours": None if math.isinf(self.ingest_hours) else round(self.ingest_hours, 3),
            "drain_bytes_per_hour": round(self.drain_bytes_per_hour),
            "eta_seconds": None if self.eta is None else round(self.eta.total_seconds()),
            "stuck": self.stuck,
            "objective": None if self.objective is None else str(self.objective),
        }


class IngestWindow:
    """Loads per table over the last `INGEST_WINDOW`, from the loads the job admitted."""

    def __init__(self) -> None:
        self._loads = SlidingTotals(INGEST_WINDOW)
        self._hours = INGEST_WINDOW.total_seconds() / 3600

    def add(self, table: str, size: int, at: datetime) -> None:
        self._loads.add(table, at, size)

    def loads_per_hour(self, table: str, now: datetime) -> float:
        return self._loads.count(table, now) / self._hours

    def bytes_per_hour(self, table: str, now: datetime) -> float:
        return self._loads.total(table, now) / self._hours


def ingest_hours(pending_bytes: int, bytes_per_hour: float) -> float:
    """Pending bytes as hours of recent ingest: 0 without debt, +Inf with debt and no ingest."""
    if pending_bytes == 0:
        return 0.0
    return pending_bytes / bytes_per_hour if bytes_per_hour > 0 else math.inf


def drain_rate(readings: list[Reading]) -> float:
    """Net bytes per hour the debt falls by: minus the least-squares slope of the readings."""
    if len(readings) < 2:
        return 0.0
    origin = readings[0].at
    xs = [(r.at - origin).total_seconds() / 3600 for r in readings]
    ys = [float(r.bytes) for r in readings]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return -sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def is_stuck(readings: list[Reading], after: int) -> bool:
    """The last `after` readings, all taken while keeping up, never fell below the first of them."""
    if len(readings) < after:
        return False
    last = readings[-after:]
    return all(r.keeping_up and r.bytes > 0 for r in last) and min(r.bytes for r in last[1:]) >= last[0].bytes


def objective(hours: float, eta: timedelta | None, stuck: bool, max_debt: timedelta) -> Objective:
    limit = max_debt.total_seconds() / 3600
    if hours > limit:
        return Objective.BREACHED
    if hours > limit / 2 or (hours > 0 and (stuck or eta is None or eta > max_debt)):
        return Objective.AT_RISK
    return Objective.MET


class DebtTrend:
    """Recent debt readings per table."""

    def __init__(self, window: timedelta = DEFAULT_WINDOW, stuck_after: int = DEFAULT_STUCK_AFTER) -> None:
        self.window = window
        self.stuck_after = stuck_after
        self._readings: dict[str, deque[Reading]] = {}
        self._lock = threading.Lock()  # the batch thread adds, the metrics scrape reads

    def add(self, table: str, reading: Reading) -> None:
        """Keep `reading`, and of the older ones those the outlook still reads: the window's, and
        the last `stuck_after` (readings kept past that add a driver's memory per table and read)."""
        with self._lock:
            readings = self._readings.setdefault(table, deque(maxlen=_KEEP))
            readings.append(reading)
            while len(readings) > self.stuck_after and reading.at - readings[0].at > self.window:
                readings.popleft()

    def readings(self, table: str) -> list[Reading]:
        with self._lock:
            return list(self._readings.get(table, ()))

    def outlook(
        self, table: str, ingest_bytes_per_hour: float, max_debt: timedelta | None = None
    ) -> Outlook | None:
        """The table's outlook as of its newest reading (None: never read)."""
        readings = self.readings(table)
        if not readings:
            return None
        newest = readings[-1]
        recent = [r for r in readings if newest.at - r.at <= self.window]
        drain = drain_rate(recent)
        if newest.bytes == 0:
            eta: timedelta | None = timedelta(0)
        else:
            eta = timedelta(hours=newest.bytes / drain) if drain > 0 else None
        stuck = is_stuck(readings, self.stuck_after)
        hours = ingest_hours(newest.bytes, ingest_bytes_per_hour)
        state = None if max_debt is None else objective(hours, eta, stuck, max_debt)
        return Outlook(newest.bytes, newest.segments, hours, drain, eta, stuck, state)

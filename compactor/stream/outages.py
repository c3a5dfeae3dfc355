"""Outages told from broken tables (DESIGN invariant 18).

An object store, a metastore or a network that goes away fails every table that has work, each
with the same kind of error. Counted as each table's own failures, a long enough outage would
quarantine them all, and they would stay quarantined after it ends. So failures are also counted
across tables: when, within `window`, at least `min_tables` tables failed with one kind of error,
and they are at least `share` of the tables attempted since the first of those failures, it is
an **outage**:

- attempts pause for `pause` (nothing is planned or started; tables come due when it ends);
- then attempts resume as a probe: a success anywhere ends the outage, another failure of that
  kind pauses again;
- failures of that kind, during it and in the window that revealed it, do not count toward any
  table's streak, so no table is quarantined for it.

Before that is known, a table whose streak reaches quarantine while another table fails with
the same kind of error, and nothing has succeeded since the first of those failures, is not
quarantined yet (`suspected`): with short cool-downs one table can fail three times before a
third table has tried at all (the years benchmark quarantined three healthy tables that way in a
40-second store outage). Its streak still grows, so it is quarantined at its next failure once
others succeed again.

A table that fails alone, or with another kind of error than everyone else's, is still a broken
table: its streak grows and it is quarantined as before. So is one whose error is the job's own
judgement of that table (a feature no merge preserves, a config it cannot use, an invalid
segment), however many other tables share it: those never make an outage.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from compactor.errors import (
    ConfigError,
    InvalidRequest,
    InvalidSegmentError,
    ManualMergeError,
    Rejected,
    TableNotFoundError,
    UnsupportedTableFeature,
)

log = logging.getLogger(__name__)

WINDOW = timedelta(minutes=10)
MIN_TABLES = 3
SHARE = 0.5

# A JVM exception class in an error's text (Spark and Hadoop errors reach Python as Py4JJavaError,
# whatever failed): `java.net.ConnectException`, `org.apache.hadoop.fs.s3a.AWSClientIOException`.
_JAVA_CLASS = re.compile(r"\b(?:[a-z][a-z0-9_]*\.)+[A-Z]\w*(?:Exception|Error)\b")


# What the job says of one table's own data or config: many tables may share it, but it never
# ends when a service comes back.
TABLES_OWN = (
    ConfigError,
    InvalidRequest,
    InvalidSegmentError,
    ManualMergeError,
    Rejected,
    TableNotFoundError,
    UnsupportedTableFeature,
)


def error_kind(error: BaseException) -> str:
    """What kind of failure: the Python type, and the first JVM exception class its text names."""
    found = _JAVA_CLASS.search(str(error))
    return f"{type(error).__name__}/{found.group()}" if found else type(error).__name__


@dataclass(frozen=True, slots=True)
class Outage:
    kind: str  # the kind of error shared by the tables
    since: datetime
    tables: int  # tables that failed with it in the window that revealed it
    paused_until: datetime  # attempts resume (a probe) then
    example: str  # one table's error, in words

    def line(self) -> str:
        return (
            f"outage since {self.since:%Y-%m-%d %H:%M:%S} UTC: {self.tables} table(s) failed with "
            f"{self.kind}; attempts paused until {self.paused_until:%H:%M:%S} (then one probe round)"
        )


@dataclass(frozen=True, slots=True)
class _Failure:
    table: str
    kind: str
    at: datetime
    counted: bool  # it grew its table's streak


class Outages:
    def __init__(
        self,
        clock: Callable[[], datetime],
        pause: timedelta,
        window: timedelta = WINDOW,
        min_tables: int = MIN_TABLES,
        share: float = SHARE,
    ) -> None:
        self.clock = clock
        self.pause = pause
        self.window = window
        self.min_tables = min_tables
        self.share = share
        self.current: Outage | None = None
        self.declared = 0  # outages seen since the start
        self._failures: deque[_Failure] = deque()
        self._attempted: dict[str, datetime] = {}  # table -> its last outcome in the window
        self._succeeded_at: datetime | None = None  # the last success of any table

    def paused(self) -> bool:
        """Attempts wait: an outage is on and its pause has not ended."""
        return self.current is not None and self.clock() < self.current.paused_until

    def failed(self, table: str, error: BaseException) -> dict[str, int] | None:
        """Count a table's failure. None: it is the table's own (its streak grows). Else it is
        part of an outage, and the result maps each table to the failures of that kind it was
        counted for before the outage was seen (empty once the outage is known): forgive them."""
        now, kind = self.clock(), error_kind(error)
        self._forget_before(now - self.window)
        self._attempted[table] = now
        if isinstance(error, TABLES_OWN):
            return None
        if self.current is not None and self.current.kind == kind:
            self._failures.append(_Failure(table, kind, now, counted=False))
            self.current = _paused(self.current, now + self.pause)
            return {}
        same = [f for f in self._failures if f.kind == kind]
        tables = {f.table for f in same} | {table}
        began = min((f.at for f in same), default=now)  # tables that tried since the trouble began
        attempted = sum(1 for at in self._attempted.values() if at >= began)
        if len(tables) < self.min_tables or len(tables) < self.share * attempted:
            self._failures.append(_Failure(table, kind, now, counted=True))
            return None
        self._failures.append(_Failure(table, kind, now, counted=False))
        self.current = Outage(
            kind, now, len(tables), now + self.pause, f"{type(error).__name__}: {error}"[:300]
        )
        self.declared += 1
        log.error("%s; no table is quarantined for it", self.current.line())
        forgive: dict[str, int] = {}
        for f in same:
            if f.counted:
                forgive[f.table] = forgive.get(f.table, 0) + 1
        self._failures = deque(
            _Failure(f.table, f.kind, f.at, counted=False) if f.kind == kind else f for f in self._failures
        )
        return forgive

    def suspected(self, table: str, error: BaseException) -> bool:
        """Might the table's failure be part of an outage not yet declared: another table failed
        with the same kind of error in the window, and no table has succeeded since?"""
        if isinstance(error, TABLES_OWN):
            return False
        kind = error_kind(error)
        others = [f.at for f in self._failures if f.kind == kind and f.table != table]
        if not others:
            return False
        return self._succeeded_at is None or self._succeeded_at < min(others)

    def succeeded(self, table: str) -> None:
        """A table's work succeeded: whatever the outage was, it is over."""
        now = self.clock()
        self._attempted[table] = now
        self._succeeded_at = now
        if self.current is not None:
            log.warning("outage of %s over: table %s succeeded; attempts resume", self.current.kind, table)
            self.current = None

    def _forget_before(self, cut: datetime) -> None:
        while self._failures and self._failures[0].at < cut:
            self._failures.popleft()
        for table in [t for t, at in self._attempted.items() if at < cut]:
            del self._attempted[table]


def _paused(outage: Outage, until: datetime) -> Outage:
    return Outage(outage.kind, outage.since, outage.tables, max(until, outage.paused_until), outage.example)

"""Cool-downs: plans and tables whose work failed, left alone for a while, for longer with each
failure in a row, and quarantined after too many."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from compactor.catalog.failures import Failure, begun_key
from compactor.catalog.fold import SegmentCatalog
from compactor.rules.due import Due, cool_down_end
from compactor.stream.due import DueTimes

DEFAULT_COOLDOWN = timedelta(minutes=5)
MAX_BACKOFF = 16  # a table's cool-down doubles with each failure in a row, up to this many periods


class CoolDown:
    """Plans (and tables) that failed, left alone for a while instead of failing again on every
    event. Each start is noted with the table in the catalog: status shows it, and a restarted
    job keeps cooling what was cooling. When one ends, its table comes due (`due`).

    A table's failures in a row lengthen its cool-downs (each twice the last, up to
    `MAX_BACKOFF` periods); after `quarantine_after` of them the table is quarantined with its
    last error (`quarantined`), until its config changes or an operator enables it again. A
    success forgives the streak."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        period: timedelta = DEFAULT_COOLDOWN,
        catalog: SegmentCatalog | None = None,
        due: DueTimes | None = None,
    ) -> None:
        self.clock = clock
        self.period = period
        self.catalog = catalog
        self.due = due
        self.quarantine_after: int | None = None
        self._until: dict[str, tuple[str, datetime]] = {}  # key -> (table, until)
        self._streak: dict[str, int] = {}  # table -> its failures in a row
        self.died_during: dict[str, Failure] = {}  # table -> a merge begun when the last run died
        if catalog is not None:  # what a previous run left cooling keeps cooling, its streaks go on
            for table in catalog.table_names:
                records = catalog.failure_records(table)
                self._until.update((f.key, (table, f.until)) for f in records if not f.running)
                settled = [f for f in records if not f.running]
                if settled and settled[0].streak:
                    self._streak[table] = settled[0].streak
                begun = [f for f in records if f.running]
                if begun:
                    self.died_during[table] = begun[0]

    def start(
        self,
        key: str,
        table: str,
        reason: str,
        rule: str | None = None,
        failed: bool = False,
        cool: bool = True,
    ) -> None:
        """Cool `key` down; `failed`: a merge failed (not merely skipped): the table's streak
        grows, and with it this cool-down."""
        now = self.clock()
        streak = self._streak[table] = (
            self._streak.get(table, 0) + 1 if failed else self._streak.get(table, 0)
        )
        until = now + self.period * min(MAX_BACKOFF, 2 ** max(0, streak - 1)) if cool else now
        # a cool-down over is forgotten: one entry per failed plan would grow with the years
        self._until = {k: v for k, v in self._until.items() if v[1] > now}
        self._until[key] = (table, until)
        if self.catalog is not None:
            self.catalog.note_failure(table, Failure(key, rule, reason, now, until, streak))
        if self.due is not None:
            self.due.lower(table, Due(until, f"the cool-down of {key} ends"))

    def streak(self, table: str) -> int:
        return self._streak.get(table, 0)

    def begun(self, key: str, table: str, rule: str | None) -> None:
        """A merge began: noted durably with the streak it would make, so that a job that dies
        during it (out of memory) counts that at its next start, and a crash loop ends."""
        if self.catalog is not None:
            now = self.clock()
            why = "the job stopped while this merge ran (killed, or out of memory?)"
            marked = Failure(begun_key(key), rule, why, now, now, self.streak(table) + 1, True)
            self.catalog.note_failure(table, marked)

    def succeeded(self, table: str) -> None:
        self._streak.pop(table, None)
        if self.catalog is not None:
            self.catalog.forgive(table)

    def forgive(self, table: str, failures: int) -> None:
        """Take back `failures` of the table's streak (they were an outage's, not its own)."""
        left = self.streak(table) - failures
        if left > 0:
            self._streak[table] = left
        else:
            self._streak.pop(table, None)

    def quarantines(self, table: str) -> bool:
        """Has the table failed often enough in a row to be quarantined?"""
        return self.quarantine_after is not None and self.streak(table) >= self.quarantine_after

    def active(self, key: str) -> bool:
        found = self._until.get(key)
        return found is not None and self.clock() < found[1]

    def cooling(self, table: str) -> list[tuple[str, datetime]]:
        """The table's cool-downs: (key, until)."""
        return [(key, until) for key, (t, until) in self._until.items() if t == table]

    def next_end(self, table: str) -> Due | None:
        """When the table's next cool-down ends (None: nothing of it cools down)."""
        return cool_down_end(self.cooling(table), self.clock())

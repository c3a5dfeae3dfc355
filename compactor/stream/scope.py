"""How far an attempt looks: near the segment its event brought, or at the whole table.

A narrow attempt plans what a full one would only on a table that was settled
(nothing runnable waited) before the event. So a table is evaluated in full
until a full evaluation finds nothing to run, then narrowly, and in full again
once `full_every` has passed since the last full evaluation (which finds plans
waiting elsewhere: a cool-down ended, time moved a segment into another pool or
out of a filter). Time layers make one merge per attempt, so after a narrow
attempt that planned, the next attempts also look where it looked.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from compactor.domain.segments import Segment
from compactor.stream.triggers import Trigger

FULL_EVALUATION_EVERY = timedelta(minutes=1)
MAX_CARRIED = 64  # segments looked near again; past this, the table is evaluated in full


class AttemptScope:
    def __init__(self, full_every: timedelta = FULL_EVALUATION_EVERY) -> None:
        self.full_every = full_every
        self._full_at: dict[str, datetime] = {}  # each table's last full evaluation
        self._settled: set[str] = set()  # tables whose last full evaluation found nothing to run
        self._carried: dict[str, tuple[Segment, ...]] = {}  # where planning narrow attempts looked
        self._last_full: dict[str, bool] = {}  # whether each table's last evaluation was full

    def near(
        self, trigger: Trigger, now: datetime, find: Callable[[str], Segment | None]
    ) -> tuple[Segment, ...] | None:
        """The segments the attempt looks near, or None for a full evaluation."""
        table, last_full = trigger.table, self._full_at.get(trigger.table)
        if (
            trigger.segment_id is None
            or trigger.only_rule
            or table not in self._settled
            or last_full is None
            or now - last_full >= self.full_every
        ):
            return None
        brought = find(trigger.segment_id)  # None: merged away since, nothing new near it
        return ((brought,) if brought else ()) + self._carried.get(table, ())

    def unsettle(self) -> None:
        """Every table's next attempt is full (what waited for a reason that ended is found)."""
        self._settled.clear()
        self._carried.clear()

    def was_full(self, table: str) -> bool:
        """Whether the table's last evaluation of every rule looked at the whole table."""
        return self._last_full.get(table, False)

    def evaluated(
        self,
        table: str,
        now: datetime,
        near: tuple[Segment, ...] | None,
        runnable: bool,
        narrow_next: bool = True,
    ) -> None:
        """Note an evaluation of every rule of `table` and whether it found plans to run
        (`narrow_next`: whether the attempts after those may look near them)."""
        self._last_full[table] = near is None
        if near is None:
            self._full_at[table] = now
            self._carried.pop(table, None)
            if runnable:
                self._settled.discard(table)
            else:
                self._settled.add(table)
        elif not runnable:
            self._carried.pop(table, None)
        elif len(near) > MAX_CARRIED or not narrow_next:
            self._settled.discard(table)
        else:
            self._carried[table] = tuple({s.id: s for s in near}.values())

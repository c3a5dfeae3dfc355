"""An off-peak window: the hours of each day (UTC) in which optional merges may run.

Outside it, optional merges (upper time layers, level-2, later pools: the merges a
write-amplification budget may defer) wait; required ones always run. Like
Paimon's `compaction.offpeak.start.hour` / `end.hour`, a window may wrap midnight
(22:00 to 06:00).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from pydantic import model_validator

from compactor.config.units import Frozen


class OffPeak(Frozen):
    """A daily window (UTC) in which optional merges may run; it may wrap midnight."""

    start: time
    """When the window opens each day (`"22:00"`, UTC)."""
    end: time
    """When it closes (`"06:00"`, UTC); before `start` means the next day."""

    @model_validator(mode="after")
    def _not_empty(self) -> OffPeak:
        if self.start == self.end:
            raise ValueError(
                f"off_peak starts and ends at {self.start}: an empty window; leave off_peak out to let "
                "optional merges run at any time"
            )
        for name, value in (("start", self.start), ("end", self.end)):
            if value.tzinfo is not None:
                raise ValueError(f"off_peak {name} {value} has a time zone; the window is in UTC")
        return self

    def contains(self, at: datetime) -> bool:
        clock = at.astimezone(UTC).time().replace(tzinfo=None)
        if self.start < self.end:
            return self.start <= clock < self.end
        return clock >= self.start or clock < self.end  # wraps midnight

    def next_start(self, at: datetime) -> datetime:
        """When the window next opens, after `at`."""
        day = at.astimezone(UTC)
        opens = datetime.combine(day.date(), self.start, UTC)
        return opens if opens > day else opens + timedelta(days=1)

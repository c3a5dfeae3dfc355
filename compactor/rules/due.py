"""When time alone could change what a table's rules plan: the table's next due time, and why.

Derived from the segments and the settings, never stored: a restart, `compactor
status` and `compactor plan --explain` compute the same answer. The sources:

- bin-pack pools: a segment enters a pool at `end + min_age` (Hydrolix's merge pools: a 2.5 GB
  segment becomes eligible for the large pool 70 minutes after its last timestamp) and
  leaves it at `end + max_age` (what it leaves behind may pack, or merge by a later rule);
- `allowed_compaction_days` and `lookback`: a segment leaves the window at
  `loaded + N days` or `end + lookback`, and the rules see one segment fewer;
- a rule's cron `schedule`: its next fire after `since` (the previous computation,
  so a fire that fell between two computations is due at once, not skipped);
- an off-peak window: optional merges wait outside it, so it is due when it opens.

Late data needs no clock: the watermark is event time (the latest end held), it moves
only with loads, and a run it seals folds less eagerly, never more. Cool-downs are the
stream's (`stream.due`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from compactor.config.off_peak import OffPeak
from compactor.config.rules import BinPackRule, next_fire
from compactor.config.tables import TableSettings
from compactor.domain.columns import Floats, SegmentColumns

JUST_AFTER = timedelta(microseconds=1)  # past a window's edge, where the segment is out of it


@dataclass(frozen=True, slots=True)
class Due:
    """A moment a table's next attempt comes due, and why; `rule` when a schedule fires it."""

    at: datetime
    why: str
    rule: str | None = None

    def __lt__(self, other: Due) -> bool:
        return self.at < other.at


def next_due(
    segments: SegmentColumns,
    settings: TableSettings,
    now: datetime,
    since: datetime | None = None,
    off_peak: OffPeak | None = None,
) -> Due | None:
    """The earliest moment after `now` at which time alone may change the table's plans (a
    schedule: at or after `since`, default `now`); None when nothing the table holds or
    configures depends on time."""
    found = [d for d in _sources(segments, settings, now, since or now, off_peak) if d is not None]
    return min(found, default=None)


def _sources(
    segments: SegmentColumns,
    settings: TableSettings,
    now: datetime,
    since: datetime,
    off_peak: OffPeak | None,
) -> list[Due | None]:
    now_ts = now.timestamp()
    found: list[Due | None] = []
    for rule in settings.rules:
        if isinstance(rule, BinPackRule):  # pools hold ages [min_age, max_age): both edges move segments
            for pool in rule.pools:
                if pool.min_age > timedelta(0):
                    at = _first_after(segments.end + pool.min_age.total_seconds(), now_ts)
                    found.append(_at(at, f"a segment reaches pool {pool.name}'s age ({pool.min_age})"))
            for pool in rule.pools:  # after the entries: at the same moment, an entry is the reason
                at = _first_after(segments.end + pool.max_age.total_seconds(), now_ts)
                found.append(_at(at, f"a segment ages out of pool {pool.name} ({pool.max_age})"))
        fire = next_fire(rule.schedule, since) if rule.schedule is not None else None
        if fire is not None:  # None: the schedule never fires again (its years are past)
            found.append(Due(max(fire, now), f"schedule {rule.schedule!r} of rule {rule.rule}", rule.rule))
    # a segment is in a pool from `end + min_age` on, but in these windows up to and including
    # their edge: it is out only just after it
    if settings.allowed_compaction_days:
        days = settings.allowed_compaction_days
        at = _first_after(segments.loaded + timedelta(days=days).total_seconds(), now_ts, edge=True)
        found.append(
            _at(at, f"a segment leaves the allowed_compaction_days window ({days} days)", JUST_AFTER)
        )
    if settings.lookback is not None:
        at = _first_after(segments.end + settings.lookback.total_seconds(), now_ts, edge=True)
        found.append(_at(at, f"a segment's data leaves the lookback ({settings.lookback})", JUST_AFTER))
    if off_peak is not None and not off_peak.contains(now) and len(segments):
        found.append(Due(off_peak.next_start(now), "the off-peak window opens: optional merges may run"))
    return found


def _first_after(times: Floats, now_ts: float, edge: bool = False) -> float | None:
    """The earliest of `times` (epoch seconds) after `now_ts` (`edge`: or at it)."""
    later = times[times >= now_ts] if edge else times[times > now_ts]
    return float(later.min()) if len(later) else None


def _at(epoch: float | None, why: str, after: timedelta = timedelta(0)) -> Due | None:
    """A due time at `epoch` (rounded to the microsecond, as the segments' times are), plus `after`."""
    return None if epoch is None else Due(datetime.fromtimestamp(epoch, UTC) + after, why)


def earliest(*dues: Due | None) -> Due | None:
    return min((d for d in dues if d is not None), default=None)


def cool_down_end(cooling: Iterable[tuple[str, datetime]], now: datetime) -> Due | None:
    """When the first of these cool-downs (key, until) still running at `now` ends."""
    ends = sorted((until, key) for key, until in cooling if until > now)
    return Due(ends[0][0], f"the cool-down of {ends[0][1]} ends") if ends else None


def table_due(
    segments: SegmentColumns,
    settings: TableSettings,
    now: datetime,
    cooling: Iterable[tuple[str, datetime]] = (),
    off_peak: OffPeak | None = None,
    since: datetime | None = None,
) -> Due | None:
    """The table's next due time: what its rules and segments make due, or a cool-down's end."""
    return earliest(next_due(segments, settings, now, since, off_peak), cool_down_end(cooling, now))

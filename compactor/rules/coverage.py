"""Which data can answer a question over a sub-partitioned table (seed 001, Kylin).

For an asked time range and sub-partition values this tells, without reading
data: the segments and values that answer; the time no segment defines (it
returns no data); the (segment, value) pairs declared but not built (a reader
must fall back to the raw source for them); and asked values that are not
declared at all (no data). Pure: the CLI feeds it the catalog and the config.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from compactor.domain.segments import Segment, SegmentState, TimeRange


@dataclass(frozen=True, slots=True)
class Answer:
    """A segment that answers part of the question, with the asked values it serves."""

    segment_id: str
    range: TimeRange
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Coverage:
    range: TimeRange | None
    answering: tuple[Answer, ...]
    undefined_ranges: tuple[TimeRange, ...]
    not_built: tuple[tuple[str, str], ...]
    undeclared: tuple[str, ...]

    @property
    def fully_served(self) -> bool:
        """True when built segments alone answer (no fallback to the raw source needed)."""
        return not self.not_built

    def to_json(self) -> dict[str, Any]:
        def span(r: TimeRange) -> dict[str, str]:
            return {"start": r.start.isoformat(), "end": r.end.isoformat()}

        return {
            "range": span(self.range) if self.range else None,
            "answering": [
                {"segment": a.segment_id, **span(a.range), "values": list(a.values)} for a in self.answering
            ],
            "undefined_ranges": [span(r) for r in self.undefined_ranges],
            "not_built": [{"segment": s, "value": v} for s, v in self.not_built],
            "undeclared": list(self.undeclared),
            "fully_served": self.fully_served,
        }


def _serves(segment: Segment, value: str) -> bool:
    # REFRESHING still serves reads (the old rows stay until the refresh commits)
    return segment.sub_partition_state(value) in (SegmentState.ONLINE, SegmentState.REFRESHING)


def _gaps(asked: TimeRange, ranges: Iterable[TimeRange]) -> list[TimeRange]:
    gaps, cursor = [], asked.start
    for r in sorted(ranges):
        if r.start > cursor:
            gaps.append(TimeRange(cursor, min(r.start, asked.end)))
        cursor = max(cursor, r.end)
        if cursor >= asked.end:
            break
    if cursor < asked.end:
        gaps.append(TimeRange(cursor, asked.end))
    return gaps


def coverage(
    segments: Sequence[Segment],
    declared: Sequence[str],
    start: datetime | None = None,
    end: datetime | None = None,
    values: Sequence[str] = (),
) -> Coverage:
    """Answer "which data can serve [start, end) for `values`?" (all declared values if none given).

    Without a time bound the question covers every segment's time (from the first
    segment's start to the last one's end).
    """
    live = [s for s in segments if s.state is not SegmentState.LOADING]
    if not live and (start is None or end is None):
        return Coverage(None, (), (), (), tuple(v for v in values if v not in declared))
    lo = start or min(s.start for s in live)
    hi = end or max(s.end for s in live)
    asked = TimeRange(lo, hi)
    wanted = list(dict.fromkeys(values)) if values else list(declared)
    undeclared = tuple(v for v in wanted if v not in declared)
    known = [v for v in wanted if v in declared]
    inside = sorted((s for s in live if s.range.overlaps(asked)), key=lambda s: (s.start, s.id))
    answering = []
    not_built = []
    for s in inside:
        served = tuple(v for v in known if _serves(s, v))
        answering.append(Answer(s.id, s.range, served))
        not_built += [(s.id, v) for v in known if not _serves(s, v)]
    if values and not known:
        answering = []  # only undeclared values asked: nothing answers, there is no data
    return Coverage(
        asked, tuple(answering), tuple(_gaps(asked, (s.range for s in inside))), tuple(not_built), undeclared
    )


def render(result: Coverage) -> str:
    """A readable table of a coverage answer."""
    lines = []
    if result.range:
        lines.append(f"asked: {result.range}")
    lines.append(f"{'segment':<32} {'start':<26} {'end':<26} values")
    for a in result.answering:
        lines.append(
            f"{a.segment_id:<32} {a.range.start.isoformat():<26} {a.range.end.isoformat():<26} "
            f"{', '.join(a.values) or '(none built)'}"
        )
    for r in result.undefined_ranges:
        lines.append(f"no segment defines {r}: no data")
    for sid, v in result.not_built:
        lines.append(f"segment {sid} has not built {v!r}: fall back to the raw source")
    for v in result.undeclared:
        lines.append(f"value {v!r} is not declared: no data")
    lines.append(
        "fully served by built segments" if result.fully_served else "needs a fallback for unbuilt data"
    )
    return "\n".join(lines)

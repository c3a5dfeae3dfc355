"""Which data can answer a question over a sub-partitioned table (Kylin's multi-level partitions).

For an asked time range and sub-partition values this tells, without reading
data: the segments, values and indexes that answer; the time no segment defines
(it returns no data); the (segment, value) pairs declared but not built and the
segments with no index (the pushdown query engine answers for them); asked
values that are not declared at all (no data); and who answers in the end.
Pure: the CLI feeds it the catalog and the config.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from compactor.domain.segments import Segment, SegmentState, TimeRange


class AnsweredBy(StrEnum):
    """Who answers the question, as Kylin's multi-level partitions decide it."""

    NO_DATA = "no_data"  # nothing defined answers: the question returns empty
    INDEX = "index"  # an index built in every answering segment serves it
    INDEX_IF_ABLE = "index_if_able"  # the segments' indexes are judged; if none can serve, pushdown
    PUSHDOWN = "pushdown"  # some asked data has no index built: the pushdown query engine answers
    NOT_SERVED = "not_served"  # it would need the pushdown query engine, and pushdown is disabled


@dataclass(frozen=True, slots=True)
class Answer:
    """A segment that answers part of the question, with the asked values and the indexes it built."""

    segment_id: str
    range: TimeRange
    values: tuple[str, ...]
    indexes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Coverage:
    range: TimeRange | None
    answering: tuple[Answer, ...]
    undefined_ranges: tuple[TimeRange, ...]
    not_built: tuple[tuple[str, str], ...]
    undeclared: tuple[str, ...]
    # indexes the caller says can serve the question's shape (empty: not said, the engine judges)
    able: tuple[str, ...] = ()
    pushdown: bool = True  # the query engine may push down what no index serves (Kylin's query pushdown)

    @property
    def fully_served(self) -> bool:
        """True when built segments alone answer (no fallback to the raw source needed)."""
        return not self.not_built and not self.unindexed

    @property
    def indexes(self) -> tuple[str, ...]:
        """The indexes judged for the question: every index some answering segment built."""
        return tuple(sorted({i for a in self.answering for i in a.indexes}))

    @property
    def unindexed(self) -> tuple[str, ...]:
        """Answering segments that built no index at all (their data can only be pushed down)."""
        return tuple(a.segment_id for a in self.answering if not a.indexes)

    @property
    def usable(self) -> tuple[str, ...]:
        """Of the `able` indexes, those built in every answering segment: one of them answers alone."""
        return tuple(i for i in self.able if all(i in a.indexes for a in self.answering))

    @property
    def answered_by(self) -> AnsweredBy:
        if not self.answering:
            return AnsweredBy.NO_DATA
        if not self.fully_served or (self.able and not self.usable):
            return AnsweredBy.PUSHDOWN if self.pushdown else AnsweredBy.NOT_SERVED
        return AnsweredBy.INDEX if self.able else AnsweredBy.INDEX_IF_ABLE

    def to_json(self) -> dict[str, Any]:
        def span(r: TimeRange) -> dict[str, str]:
            return {"start": r.start.isoformat(), "end": r.end.isoformat()}

        return {
            "range": span(self.range) if self.range else None,
            "answering": [
                {
                    "segment": a.segment_id,
                    **span(a.range),
                    "values": list(a.values),
                    "indexes": list(a.indexes),
                }
                for a in self.answering
            ],
            "undefined_ranges": [span(r) for r in self.undefined_ranges],
            "not_built": [{"segment": s, "value": v} for s, v in self.not_built],
            "undeclared": list(self.undeclared),
            "indexes": list(self.indexes),
            "unindexed": list(self.unindexed),
            "usable": list(self.usable),
            "fully_served": self.fully_served,
            "pushdown": self.pushdown,
            "answered_by": str(self.answered_by),
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
    able: Sequence[str] = (),
    pushdown: bool = True,
) -> Coverage:
    """Answer "which data can serve [start, end) for `values`?".

    Without a time bound the question covers every segment's time (from the first
    segment's start to the last one's end). Without values it asks for no
    sub-partition in particular: each segment answers with what it built (Kylin's
    case 2). `able` names the indexes that can serve the question's shape, when
    the caller knows; otherwise the segments' indexes are listed for the engine to judge.
    Without `pushdown` what no index serves is not served at all.
    """
    live = [s for s in segments if s.state is not SegmentState.LOADING]
    if not live and (start is None or end is None):
        return Coverage(
            None, (), (), (), tuple(v for v in values if v not in declared), tuple(able), pushdown
        )
    lo = start or min(s.start for s in live)
    hi = end or max(s.end for s in live)
    asked = TimeRange(lo, hi)
    wanted = list(dict.fromkeys(values))
    undeclared = tuple(v for v in wanted if v not in declared)
    known = [v for v in wanted if v in declared]
    inside = sorted((s for s in live if s.range.overlaps(asked)), key=lambda s: (s.start, s.id))
    answering = []
    not_built = []
    for s in inside:
        asked_here = known if values else sorted(v for v in s.sub_partitions if v in declared)
        served = tuple(v for v in asked_here if _serves(s, v))
        answering.append(Answer(s.id, s.range, served, tuple(sorted(s.indexes))))
        not_built += [(s.id, v) for v in asked_here if not _serves(s, v)]
    if values and not known:
        answering = []  # only undeclared values asked: nothing answers, there is no data
    return Coverage(
        asked,
        tuple(answering),
        tuple(_gaps(asked, (s.range for s in inside))),
        tuple(not_built),
        undeclared,
        tuple(dict.fromkeys(able)),
        pushdown,
    )


def render(result: Coverage) -> str:
    """A readable table of a coverage answer, ending with who answers and why."""
    lines = []
    if result.range:
        lines.append(f"asked: {result.range}")
    lines.append(f"{'segment':<32} {'start':<26} {'end':<26} {'values':<20} indexes")
    for a in result.answering:
        lines.append(
            f"{a.segment_id:<32} {a.range.start.isoformat():<26} {a.range.end.isoformat():<26} "
            f"{', '.join(a.values) or '(none built)':<20} {', '.join(a.indexes) or '(none built)'}"
        )
    for r in result.undefined_ranges:
        lines.append(f"no segment defines {r}: no data")
    fallback = "the pushdown query engine answers" if result.pushdown else "not served (pushdown disabled)"
    for sid, v in result.not_built:
        lines.append(f"segment {sid} has not built {v!r}: {fallback}")
    for sid in result.unindexed:
        lines.append(f"segment {sid} has built no index: {fallback}")
    for v in result.undeclared:
        lines.append(f"value {v!r} is not declared: no data")
    lines.append(_verdict(result))
    return "\n".join(lines)


def _verdict(result: Coverage) -> str:
    judged = ", ".join(result.indexes)
    match result.answered_by:
        case AnsweredBy.NO_DATA:
            return "answered by: no data"
        case AnsweredBy.INDEX:
            return f"answered by: index {result.usable[0]} (built in every answering segment)"
        case AnsweredBy.INDEX_IF_ABLE:
            otherwise = "the pushdown query engine" if result.pushdown else "not served (pushdown disabled)"
            return f"answered by: indexes {judged} if they can answer, otherwise {otherwise}"
        case AnsweredBy.NOT_SERVED:
            return "not served: pushdown disabled (no index built in every answering segment serves it)"
        case _:
            if result.fully_served:
                able = ", ".join(result.able)
                return (
                    f"answered by: the pushdown query engine (no index of {able} is built in every segment)"
                )
            return "answered by: the pushdown query engine (the indexes cannot meet the whole question)"

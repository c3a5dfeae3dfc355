"""Listing and searching a table's sub-partition values: the "Manage Sub-Partition Values" of
Kylin's multi-level partitions.

Pure: for each declared value, which segments built it and in which state; values
segments hold that the config does not declare (any more) are listed too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compactor.domain.segments import Segment


@dataclass(frozen=True, slots=True)
class ValueUsage:
    value: str
    declared: bool
    built_in: tuple[str, ...]  # segment ids, time order
    not_built_in: tuple[str, ...]
    states: tuple[tuple[str, str], ...]  # (segment id, LOADING or REFRESHING) where not ONLINE

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "declared": self.declared,
            "built_in": list(self.built_in),
            "not_built_in": list(self.not_built_in),
            "states": dict(self.states),
        }


def value_usage(
    segments: Sequence[Segment], declared: Sequence[str], search: str | None = None
) -> list[ValueUsage]:
    """Every declared value (then undeclared ones segments hold), optionally only those containing
    `search` (case-insensitive, as a search box filters; queries still match values exactly)."""
    ordered = sorted(segments, key=lambda s: (s.start, s.id))
    held = sorted({v for s in ordered for v in s.sub_partitions} - set(declared))
    values = [*declared, *held]
    if search is not None:
        values = [v for v in values if search.casefold() in v.casefold()]
    return [
        ValueUsage(
            value,
            value in declared,
            tuple(s.id for s in ordered if value in s.sub_partitions),
            tuple(s.id for s in ordered if value not in s.sub_partitions),
            tuple(
                (s.id, str(st)) for s in ordered if (st := s.sub_partition_state(value)) and st != "ONLINE"
            ),
        )
        for value in values
    ]


def render_usage(usages: Sequence[ValueUsage], segment_count: int) -> str:
    lines = [f"{'value':<24} {'built in':<10} states"]
    for u in usages:
        states = ", ".join(f"{sid} {st}" for sid, st in u.states) or "-"
        note = "" if u.declared else "  (not declared: delete it or declare it)"
        lines.append(f"{u.value:<24} {len(u.built_in):>3} of {segment_count:<4} {states}{note}")
    if not usages:
        lines.append("(no matching value)")
    return "\n".join(lines)

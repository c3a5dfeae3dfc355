"""`compactor status`'s shard section: which job runs each shard, how far behind it is, its tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from compactor.kafka.shards import ShardLayout


@dataclass(frozen=True, slots=True)
class ShardStatus:
    index: int
    partitions: tuple[int, ...]
    owner: str | None  # `client id (host)` of the job running it; None: no job holds it
    behind: int | None  # events not yet processed on its partitions (None: unknown)
    tables: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "shard": self.index,
            "partitions": list(self.partitions),
            "job": self.owner,
            "events_behind": self.behind,
            "tables": list(self.tables),
        }


def shard_statuses(
    layout: ShardLayout,
    owners: Mapping[int, str],
    processed: Mapping[int, int] | None,
    ends: Mapping[int, int] | None,
    tables: Iterable[str],
) -> list[ShardStatus]:
    """Per shard: `processed` (partition -> the offset its query has read up to) against the
    topic's `ends`; either None when it could not be read."""
    names = sorted(tables)
    found = []
    for index in range(layout.shards):
        partitions = tuple(layout.partitions_of(index))
        behind = None
        if processed is not None and ends is not None:
            behind = sum(max(0, ends.get(p, 0) - processed.get(p, 0)) for p in partitions)
        owns = layout.owns(index)
        found.append(
            ShardStatus(index, partitions, owners.get(index), behind, tuple(t for t in names if owns(t)))
        )
    return found


def render_shards(layout: ShardLayout, statuses: list[ShardStatus]) -> str:
    lines = [f"shards: {layout.shards} over the {layout.partitions} partition(s) of {layout.topic}"]
    for s in statuses:
        behind = "lag unknown" if s.behind is None else f"{s.behind} event(s) behind"
        job = s.owner or "no job runs it"
        tables = ", ".join(s.tables) or "no tables yet"
        lines.append(
            f"  shard {s.index} (partitions {list(s.partitions)}): {job}; {behind}; tables: {tables}"
        )
    return "\n".join(lines)

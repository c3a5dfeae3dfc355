"""What a config would have done with a recorded stream of loads (`compactor plan --replay-topic`).

The loads go through the same simulation `compactor plan --simulate` runs:
each arrives at its load time and cascades merges as the stream does. Pure: the
caller reads the loads (from the topic or a file) and draws the picture.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from compactor.config.tables import ProjectConfig
from compactor.domain.plans import MergePlan
from compactor.domain.segments import Segment
from compactor.rules.engine import evaluate
from compactor.rules.simulation import Simulation, check_segments


@dataclass(frozen=True, slots=True)
class WhatIf:
    merges: tuple[MergePlan, ...]
    ingested_bytes: int
    counts: tuple[tuple[datetime, int], ...]  # live segments (every table) after each load
    debt: dict[str, tuple[int, int, int]]  # per table at the end: ready plans, their segments, bytes

    @property
    def rewritten_bytes(self) -> int:
        return sum(p.bytes_in for p in self.merges)

    @property
    def write_amplification(self) -> float:
        return self.rewritten_bytes / self.ingested_bytes if self.ingested_bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "merges": len(self.merges),
            "bytes_ingested": self.ingested_bytes,
            "bytes_rewritten": self.rewritten_bytes,
            "write_amplification": round(self.write_amplification, 4),
            "max_segments": max((n for _, n in self.counts), default=0),
            "final_segments": self.counts[-1][1] if self.counts else 0,
            "debt": {
                t: {"plans": plans, "segments": segments, "bytes": size}
                for t, (plans, segments, size) in self.debt.items()
            },
        }


def what_if(config: ProjectConfig, loads: list[Segment]) -> WhatIf:
    """Replay `loads` (in arrival order) under `config`."""
    check_segments(loads, config)
    sim = Simulation(config)
    tables = list(dict.fromkeys(s.table for s in loads))
    counts = []
    for segment in loads:
        sim.arrive(segment)
        counts.append((segment.loaded_at, sum(len(sim.catalog.segments(t)) for t in tables)))
    debt = {}
    if loads:
        now = max(s.loaded_at for s in loads)
        for table in tables:
            ready = evaluate(
                table, sim.catalog.columns(table), config.for_table(table), now, explain=False
            ).ready
            debt[table] = (len(ready), sum(len(p.inputs) for p in ready), sum(p.bytes_in for p in ready))
    return WhatIf(tuple(sim.merges), sum(s.bytes for s in loads), tuple(counts), debt)


def differences(candidate: WhatIf, baseline: WhatIf) -> dict[str, Any]:
    """What the candidate config does that the baseline does not, and the other way round."""
    ours = {p.plan_id: p for p in candidate.merges}
    theirs = {p.plan_id: p for p in baseline.merges}
    return {
        "merges_only_in_candidate": [ours[i].summary() for i in ours if i not in theirs],
        "merges_only_in_baseline": [theirs[i].summary() for i in theirs if i not in ours],
        "write_amplification": round(candidate.write_amplification - baseline.write_amplification, 4),
        "max_segments": max((n for _, n in candidate.counts), default=0)
        - max((n for _, n in baseline.counts), default=0),
    }

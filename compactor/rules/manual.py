"""Custom (manual) merge of named segments (Kylin's manual merge, CarbonData's custom compaction), fully
validated."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from compactor.config.tables import TableSettings
from compactor.domain.plans import MergePlan, make_plan
from compactor.domain.segments import Segment, SegmentState
from compactor.errors import ManualMergeError

RULE = "manual"


def plan(
    table: str, segment_ids: Sequence[str], segments: Sequence[Segment], settings: TableSettings
) -> MergePlan:
    """The plan merging exactly `segment_ids`, or ManualMergeError naming the ids and the reason."""
    if len(segment_ids) < 2:
        raise ManualMergeError(
            f"table {table}: a merge needs at least two segment ids, got {list(segment_ids)}"
        )
    duplicates = sorted({i for i in segment_ids if list(segment_ids).count(i) > 1})
    if duplicates:
        raise ManualMergeError(f"table {table}: segment ids listed twice: {', '.join(duplicates)}")
    by_id = {s.id: s for s in segments}
    missing = [i for i in segment_ids if i not in by_id]
    if missing:
        raise ManualMergeError(f"table {table}: no such segment(s): {', '.join(missing)}")
    chosen = [by_id[i] for i in segment_ids]
    if not settings.merge_enabled:
        raise ManualMergeError(f"table {table}: merging is disabled for this table")
    busy = [f"{s.id} ({s.state})" for s in chosen if s.state is not SegmentState.ONLINE]
    busy += [
        f"{s.id} (sub-partition {v} {st})"
        for s in chosen
        if s.state is SegmentState.ONLINE
        for v, st in s.sub_partition_states
    ]
    if busy:
        raise ManualMergeError(f"table {table}: segment(s) not in a mergeable state: {', '.join(busy)}")
    versions = {s.schema_version for s in chosen}
    if len(versions) > 1:
        detail = ", ".join(f"{s.id}=v{s.schema_version}" for s in chosen)
        raise ManualMergeError(f"table {table}: inconsistent schema versions: {detail}")
    # Kylin's three merge conditions: consistent indexes, consistent sub-partition values, continuous time
    _consistent(table, chosen, "indexes", lambda s: s.indexes)
    _consistent(table, chosen, "sub-partition values", lambda s: s.sub_partitions)
    if settings.needs_disjoint_ranges:
        ordered = sorted(chosen, key=lambda s: s.start)
        for prev, nxt in itertools.pairwise(ordered):
            if nxt.start > prev.end:
                raise ManualMergeError(
                    f"table {table}: gap between {prev.id} (ends {prev.end.isoformat()}) "
                    f"and {nxt.id} (starts {nxt.start.isoformat()}): time ranges are not continuous"
                )
            if nxt.start < prev.end:
                raise ManualMergeError(
                    f"table {table}: {prev.id} and {nxt.id} overlap: time ranges are not continuous"
                )
    return make_plan(table, RULE, chosen)


def _consistent(
    table: str, chosen: Sequence[Segment], what: str, built: Callable[[Segment], frozenset[str]]
) -> None:
    """Refuse, naming the condition, unless every chosen segment built the same `what`."""
    sets = {built(s) for s in chosen}
    if len(sets) > 1:
        differing = sorted(frozenset().union(*sets) - frozenset.intersection(*sets))
        detail = "; ".join(f"{s.id}={sorted(built(s))}" for s in chosen)
        raise ManualMergeError(
            f"table {table}: inconsistent {what} ({', '.join(differing)} not in every segment): {detail}"
        )

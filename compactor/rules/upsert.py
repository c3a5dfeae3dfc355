"""Upsert compaction (Apache Pinot's): drop superseded rows, and merge small segments.

A row is invalid when its key has a row with a higher comparison value (ties:
the later load wins). A segment qualifies when its invalid rows reach both
thresholds (dropping them is the work), or when it is small: under half of
both output limits in valid rows and bytes (merging it is the work).
Qualifying segments are taken in load order and merged M:1, each output's
valid rows within `max_records_per_segment` and its valid bytes within
`max_segment_size`; a group of one is rewritten only when it has rows to drop.
Counting invalid rows needs the data, so the caller passes the counts in
(`invalid`: None when they are not known, and nothing is planned), by segment
id, or as an empty mapping when the segments' `invalid` column holds them (the
stream's key index notes them in the catalog's columns: no per-segment lookup).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from compactor.config.rules import RuleName, UpsertCompactionRule
from compactor.domain.columns import SegmentColumns, order_by
from compactor.domain.plans import Decision, MergePlan, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment

RULE = RuleName.UPSERT_COMPACTION


@dataclass(frozen=True, slots=True)
class _Sizes:
    """Per segment, vectorised (tables hold millions): rows, invalid rows, valid rows and bytes."""

    records: npt.NDArray[np.int64]
    invalid: npt.NDArray[np.int64]
    valid: npt.NDArray[np.int64]
    valid_bytes: npt.NDArray[np.float64]

    @classmethod
    def of(cls, segments: SegmentColumns, invalid: Mapping[str, int]) -> _Sizes:
        records, bad = segments.records, _invalid_column(segments, invalid)
        size = segments.size.astype(np.float64)
        valid = np.maximum(records - bad, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            valid_bytes = np.where(records > 0, size * valid / records, size)
        return cls(records, bad, valid, valid_bytes)

    def dirty(self, rule: UpsertCompactionRule) -> npt.NDArray[np.bool_]:
        """Whose invalid rows reach both thresholds."""
        with np.errstate(divide="ignore", invalid="ignore"):
            percent = 100.0 * self.invalid / self.records  # the same float64 operations as Python's
        return (
            (self.records > 0)
            & (self.invalid >= rule.invalid_records_threshold_count)
            & (percent >= rule.invalid_records_threshold_percent)
        )

    def small(self, rule: UpsertCompactionRule) -> npt.NDArray[np.bool_]:
        """Under half of both output limits: worth merging with others."""
        return (2 * self.valid < rule.max_records_per_segment) & (
            2 * self.valid_bytes < rule.max_segment_size
        )


def _invalid_column(segments: SegmentColumns, invalid: Mapping[str, int]) -> npt.NDArray[np.int64]:
    """Invalid rows per segment: from the map by id, or (an empty map) the segments' column."""
    return segments.values_for(invalid) if invalid else segments.invalid


def around(
    segments: SegmentColumns,
    near: Collection[Segment],
    invalid: Mapping[str, int],
    rule: UpsertCompactionRule,
) -> SegmentColumns:
    """Where an attempt after new loads must look, on a table settled before them: the
    segments they brought or whose counts they changed (`near`: only those can have become
    dirty), and every segment that may be small (a lone small one waits for a partner)."""
    valid = segments.records - _invalid_column(segments, invalid)
    maybe_small = 2 * valid < rule.max_records_per_segment  # the rows half of `small`
    maybe_small[segments.positions({s.id for s in near})] = True
    return segments.take(maybe_small)


def plan(
    segments: Sequence[Segment],
    rule: UpsertCompactionRule,
    table: str,
    invalid: Mapping[str, int] | None,
    explain: bool = True,
) -> RuleOutcome:
    if invalid is None:
        skipped = [
            Decision(s.id, RULE, False, SkipReason.NO_STATISTICS, "invalid-row counts not computed")
            for s in segments
        ]
        return RuleOutcome((), tuple(skipped) if explain else ())
    columns = SegmentColumns.of(segments)
    sizes = _Sizes.of(columns, invalid)
    dirty, small = sizes.dirty(rule), sizes.small(rule)
    candidates = np.flatnonzero(dirty | small)
    in_load_order = candidates[order_by(columns.loaded[candidates], columns.take(candidates))]
    groups = _groups(in_load_order.tolist(), sizes, rule)
    kept = [g for g in groups if len(g) > 1 or dirty[g[0]]]  # a lone clean segment: nothing to do
    plans = [make_plan(table, RULE, columns.pick(g), allow_single=True) for g in kept]
    if not explain:
        return RuleOutcome(tuple(plans))
    return RuleOutcome(tuple(plans), tuple(_explain(segments, sizes, dirty, kept, plans, rule)))


def _groups(order: list[int], sizes: _Sizes, rule: UpsertCompactionRule) -> list[list[int]]:
    """Consecutive segments (in load order) packed within both output limits."""
    groups: list[list[int]] = []
    rows = size = 0.0
    for i in order:
        valid, valid_bytes = int(sizes.valid[i]), float(sizes.valid_bytes[i])
        if (
            not groups
            or rows + valid > rule.max_records_per_segment
            or size + valid_bytes > rule.max_segment_size
        ):
            groups.append([])
            rows = size = 0.0
        groups[-1].append(i)
        rows += valid
        size += valid_bytes
    return groups


def _explain(
    segments: Sequence[Segment],
    sizes: _Sizes,
    dirty: npt.NDArray[np.bool_],
    kept: list[list[int]],
    plans: list[MergePlan],
    rule: UpsertCompactionRule,
) -> list[Decision]:
    chosen = {i: p for group, p in zip(kept, plans, strict=True) for i in group}
    decisions = []
    for i, s in enumerate(segments):
        counts = f"{sizes.invalid[i]} of {s.records} rows invalid"
        if i in chosen:
            why = f"{counts}; dropped" if dirty[i] else f"{counts}; small, merged with others"
            decisions.append(Decision(s.id, RULE, True, None, why, chosen[i].plan_id))
        elif dirty[i] or 2 * sizes.valid[i] < rule.max_records_per_segment:
            decisions.append(
                Decision(s.id, RULE, False, SkipReason.NOTHING_TO_MERGE_WITH, f"{counts}; small, alone")
            )
        else:
            thresholds = f"thresholds {rule.invalid_records_threshold_count} rows and {rule.invalid_records_threshold_percent}%"
            decisions.append(
                Decision(s.id, RULE, False, SkipReason.BELOW_INVALID_THRESHOLD, f"{counts}; {thresholds}")
            )
    return decisions

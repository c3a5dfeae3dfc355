"""Upsert compaction (seed 004, Apache Pinot).

A row is invalid when its key has a row with a higher comparison value (ties:
the later load wins). Segments whose invalid rows reach both thresholds are
rewritten without them and merged M:1 in load order, each output's valid rows
staying within `max_records_per_segment`. One segment alone is still rewritten:
dropping its invalid rows is the work. Counting invalid rows needs the data, so
the caller passes the counts in (`invalid`), computed by the executor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from compactor.config.rules import RuleName, UpsertCompactionRule
from compactor.domain.plans import Decision, MergePlan, RuleOutcome, SkipReason, make_plan
from compactor.domain.segments import Segment

RULE = RuleName.UPSERT_COMPACTION
_RECORDS = attrgetter("records")
_ID = attrgetter("id")


def _qualifying(
    segments: Sequence[Segment], invalid: Sequence[int], rule: UpsertCompactionRule
) -> npt.NDArray[np.bool_]:
    """Which segments' invalid rows reach both thresholds (vectorised: tables hold millions)."""
    records = np.fromiter(map(_RECORDS, segments), np.int64, len(segments))
    bad = np.asarray(invalid, dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        percent = 100.0 * bad / records  # the same float64 operations as Python's 100.0 * bad / records
    return (
        (records > 0)
        & (bad >= rule.invalid_records_threshold_count)
        & (percent >= rule.invalid_records_threshold_percent)
    )


def plan(
    segments: Sequence[Segment],
    rule: UpsertCompactionRule,
    table: str,
    invalid: Mapping[str, int] | None,
    explain: bool = True,
) -> RuleOutcome:
    decisions: list[Decision] = []
    if invalid is None:
        if explain:
            decisions = [
                Decision(s.id, RULE, False, SkipReason.NO_STATISTICS, "invalid-row counts not computed")
                for s in segments
            ]
        return RuleOutcome((), tuple(decisions))
    bad = list(map(invalid.get, map(_ID, segments), repeat(0)))
    qualifying = _qualifying(segments, bad, rule)
    # without explanations only the (few) qualifying segments need sorting and walking
    considered = range(len(segments)) if explain else np.flatnonzero(qualifying).tolist()
    groups: list[list[Segment]] = []
    valid_in_group = 0
    for i in sorted(considered, key=lambda i: (segments[i].loaded_at, segments[i].id)):
        s = segments[i]
        if not qualifying[i]:
            decisions.append(
                Decision(
                    s.id,
                    RULE,
                    False,
                    SkipReason.BELOW_INVALID_THRESHOLD,
                    f"{bad[i]} of {s.records} rows invalid; thresholds {rule.invalid_records_threshold_count} rows "
                    f"and {rule.invalid_records_threshold_percent}%",
                )
            )
            continue
        valid = s.records - bad[i]
        if not groups or valid_in_group + valid > rule.max_records_per_segment:
            groups.append([])
            valid_in_group = 0
        groups[-1].append(s)
        valid_in_group += valid
    plans: list[MergePlan] = []
    for group in groups:
        merge = make_plan(table, RULE, group, allow_single=True)
        plans.append(merge)
        if explain:
            decisions += [
                Decision(s.id, RULE, True, None, f"{invalid.get(s.id, 0)} invalid rows", merge.plan_id)
                for s in group
            ]
    return RuleOutcome(tuple(plans), tuple(decisions))

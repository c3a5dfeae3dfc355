"""Plans and decisions: what the rules decide, why, and what a committed plan did.

Pure values (stdlib only). A plan's id is deterministic (table + rule + sorted
input ids), so a replayed plan is recognised rather than executed twice.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from compactor.domain.certificate import Certificate
from compactor.domain.segments import Origin, Segment, SegmentState, TimeRange
from compactor.errors import InvalidRequest, InvalidSegmentError


class SkipReason(StrEnum):
    """Why a rule left a segment alone; every skip names one."""

    NOT_COMPLETED = "not_completed"
    MERGE_DISABLED = "merge_disabled"
    PRESERVED = "preserved"
    TOO_OLD = "too_old"
    OUTSIDE_LOOKBACK = "outside_lookback"
    CLAIMED = "claimed_by_earlier_plan"
    AT_OR_ABOVE_THRESHOLD = "at_or_above_threshold"
    INCOMPLETE_BUCKET = "incomplete_bucket"
    GAP = "gap"
    NOTHING_TO_MERGE_WITH = "nothing_to_merge_with"
    VERSION_MISMATCH = "version_mismatch"
    SUB_PARTITIONS_DIFFER = "sub_partitions_differ"
    INDEXES_DIFFER = "indexes_differ"
    ONE_MERGE_PER_ATTEMPT = "one_merge_per_attempt"
    BELOW_LEVEL_COUNT = "below_level_count"
    FINAL_LEVEL = "final_level"
    ABOVE_SIZE_THRESHOLD = "above_size_threshold"
    NO_POOL = "no_pool"
    POOL_LIMIT = "pool_limit"
    POOL_WIDTH = "pool_width"
    BELOW_INVALID_THRESHOLD = "below_invalid_threshold"
    SUB_PARTITIONING_OFF = "sub_partitioning_off"
    NO_STATISTICS = "no_statistics"
    TASK_LIMIT = "task_limit"
    CONFORMS = "conforms"
    WA_BUDGET = "wa_budget"
    LATE_WAITING = "late_waiting"  # late data waiting beside its bucket for the fold
    LEVEL_IN_FLIGHT = "level_in_flight"  # minor: a running merge still makes segments of the level
    KEEPS_M_TO_1 = "keeps_m_to_1"  # an upsert table's refresh never re-buckets, repartitions or splits


@dataclass(frozen=True, slots=True)
class Decision:
    """What one rule decided for one segment, and why."""

    segment_id: str
    rule: str
    chosen: bool
    reason: SkipReason | None = None
    detail: str = ""
    plan_id: str | None = None


@dataclass(frozen=True, slots=True)
class MergePlan:
    """Replace `inputs` with `output` in one transaction.

    `plan_id` is deterministic (table + rule + sorted input ids), so a replayed
    plan is recognised rather than executed twice. `table_version` is the Delta
    version the plan was made against (set by the stream; None in a dry run).
    `table_wide` plans rewrite every segment of the table in one commit (a schema
    change: Delta has one schema per table), not only their inputs.
    """

    plan_id: str
    table: str
    rule: str
    inputs: tuple[Segment, ...]
    output: Segment
    level: str | None = None
    pool: str | None = None
    table_version: int | None = None
    table_wide: bool = False

    @property
    def input_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.inputs)

    def summary(self) -> dict[str, object]:
        """The plan as results and reports name it: id, table, rule, level or pool, inputs."""
        keys = ("plan_id", "table", "rule", "level", "pool")
        return {k: getattr(self, k) for k in keys} | {"inputs": list(self.input_ids)}

    @property
    def records_in(self) -> int:
        return sum(s.records for s in self.inputs)

    @property
    def bytes_in(self) -> int:
        return sum(s.bytes for s in self.inputs)


@dataclass(frozen=True, slots=True)
class Commit:
    """What a plan's Delta commit did: one type for merges and refreshes.

    `outputs` are the segments the commit wrote, with the sizes Delta recorded;
    `already_done` when a replay found the plan committed earlier; `data_change`
    is False when the commit only rearranged rows (Delta's `dataChange=false`).
    """

    version: int
    outputs: tuple[Segment, ...]
    records_out: int
    bytes_out: int
    duration_ms: int = 0
    already_done: bool = False
    data_change: bool = True
    layout: str | None = None  # the order rows were laid out in (`zorder(a,b)`); None: as read
    # the rewrite's two phases, when known: writing (and uploading) the files, then Delta's commit
    write_ms: int | None = None
    commit_ms: int | None = None
    certificate: Certificate | None = None  # the rows it read and wrote, proven equal before it


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """A rule's answer: the plans it makes and a decision for each segment it saw."""

    plans: tuple[MergePlan, ...] = ()
    decisions: tuple[Decision, ...] = field(default=())
    # merges ready now that the rule leaves for later attempts (time layers make one per attempt):
    # they count as merge debt
    waiting: tuple[MergePlan, ...] = ()
    # ready merges inside a larger planned or waiting one, made instead of it when a
    # write-amplification budget defers the larger (time layers)
    alternatives: tuple[MergePlan, ...] = ()


PLAN_ID_DIGITS = 24
PLAN_ID = re.compile(rf"^[0-9a-f]{{{PLAN_ID_DIGITS}}}$")


def plan_id_for(table: str, rule: str, input_ids: Iterable[str]) -> str:
    """Deterministic plan id: the same table, rule and inputs give the same id."""
    digest = hashlib.sha256("\x1f".join([table, rule, *sorted(input_ids)]).encode())
    return digest.hexdigest()[:PLAN_ID_DIGITS]


def validate_plan_id(plan_id: str) -> str:
    """Return `plan_id` if `plan_id_for` could have made it, else raise: an operator's typo is
    caught where it is typed, not after a round trip through the job."""
    if not isinstance(plan_id, str) or not PLAN_ID.match(plan_id):
        raise InvalidRequest(
            f"plan id {plan_id!r} is invalid: a plan id is {PLAN_ID_DIGITS} lowercase hex digits "
            "(a MergeResult's plan_id)"
        )
    return plan_id


def output_id(plan_id: str) -> str:
    """The id of the segment a merge writes (a refresh names its outputs after
    `layout.refresh_output_prefix` instead)."""
    return f"m-{plan_id}"


def merged_output(plan_id: str, table: str, inputs: Sequence[Segment], level: int | None = None) -> Segment:
    """The segment that replaces `inputs`: their span, totals and latest load time.

    Every field is derived from the inputs, so planning is a pure function and a
    dry run predicts exactly what the stream will write.
    """
    if not inputs:
        raise InvalidSegmentError(f"plan {plan_id}: a merge needs inputs")
    first = inputs[0]
    return Segment(
        id=output_id(plan_id),
        table=table,
        range=TimeRange(min(s.start for s in inputs), max(s.end for s in inputs)),
        loaded_at=max(s.loaded_at for s in inputs),
        records=sum(s.records for s in inputs),
        bytes=sum(s.bytes for s in inputs),
        sub_partitions=first.sub_partitions,
        indexes=first.indexes,
        state=SegmentState.ONLINE,
        schema_version=max(s.schema_version for s in inputs),
        level=max(s.level for s in inputs) if level is None else level,
        origin=Origin.MERGE,
    )


def make_plan(
    table: str,
    rule: str,
    inputs: Sequence[Segment],
    level: str | None = None,
    pool: str | None = None,
    output_level: int | None = None,
    allow_single: bool = False,
) -> MergePlan:
    """Build a plan with its deterministic id and derived output.

    A plan of one input is a no-op for a plain merge and is refused, unless the
    rule rewrites rows (`allow_single`, e.g. upsert compaction dropping invalid rows).
    """
    if len(inputs) < (1 if allow_single else 2):
        raise InvalidSegmentError(f"table {table}: a {rule} merge needs at least two inputs")
    ordered = tuple(sorted(inputs, key=lambda s: (s.start, s.end, s.id)))
    plan_id = plan_id_for(table, rule, (s.id for s in ordered))
    output = merged_output(plan_id, table, ordered, output_level)
    return MergePlan(plan_id, table, rule, ordered, output, level=level, pool=pool)

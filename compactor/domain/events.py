"""The events the compactor consumes and produces, as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from compactor.domain.certificate import Certificate
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import Segment


class SegmentAction(StrEnum):
    """What a SegmentCompleted event reports."""

    CREATE = "CREATE"
    ADD_SUB_PARTITION = "ADD_SUB_PARTITION"
    REFRESH_SUB_PARTITION = "REFRESH_SUB_PARTITION"


@dataclass(frozen=True, slots=True)
class SegmentCompleted:
    """A segment is complete in Delta (a load, or the output of a merge/refresh)."""

    segment: Segment
    produced_at: datetime
    config_version: int = 1
    plan_id: str | None = None
    action: SegmentAction = SegmentAction.CREATE


class MergeStatus(StrEnum):
    """How a plan ended: committed (or found committed), failed, or skipped as stale."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What happened to one plan. `records_out`/`bytes_out` come from the Delta commit."""

    plan: MergePlan
    status: MergeStatus
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    duration_ms: int
    produced_at: datetime
    error: str | None = None
    table_version: int | None = None
    invalid_rows_removed: int = 0
    outputs: tuple[Segment, ...] = ()  # when a plan writes several segments (refresh)
    # False when the commit only rearranged rows (dataChange=false): readers of the table saw no change
    data_change: bool = True
    layout: str | None = None  # the order the rewrite applied (`SortConfig.describe`)
    write_ms: int | None = None  # the commit's phases (metrics only, not in the event)
    commit_ms: int | None = None
    certificate: Certificate | None = None  # what the merge proved before its commit

    @classmethod
    def succeeded(cls, plan: MergePlan, commit: Commit, at: datetime, upsert: bool = False) -> MergeResult:
        """The result of a committed plan (a fresh commit or one a replay found).

        Upsert compaction reports the rows it dropped; a refresh, which may write
        several segments, lists them in `outputs`.
        """
        several = len(commit.outputs) != 1 or commit.outputs[0].id != plan.output.id
        return cls(
            plan=plan,
            status=MergeStatus.SUCCEEDED,
            records_in=plan.records_in,
            records_out=commit.records_out,
            bytes_in=plan.bytes_in,
            bytes_out=commit.bytes_out,
            duration_ms=commit.duration_ms,
            produced_at=at,
            table_version=commit.version,
            invalid_rows_removed=plan.records_in - commit.records_out if upsert else 0,
            outputs=commit.outputs if several else (),
            data_change=commit.data_change,
            layout=commit.layout,
            write_ms=commit.write_ms,
            commit_ms=commit.commit_ms,
            certificate=commit.certificate,
        )

    @classmethod
    def unsuccessful(cls, plan: MergePlan, status: MergeStatus, error: str, at: datetime) -> MergeResult:
        """A plan that failed, or was skipped because its inputs changed under it."""
        return cls(
            plan=plan,
            status=status,
            records_in=plan.records_in,
            records_out=0,
            bytes_in=plan.bytes_in,
            bytes_out=0,
            duration_ms=0,
            produced_at=at,
            error=error,
        )


@dataclass(frozen=True, slots=True)
class CompactionRequested:
    """Run `rule` once now, merge exactly `segment_ids` (a manual merge), delete the rows of
    the sub-partition value `delete_sub_partition` from every segment, turn the table's
    merging off or on (`merging`), or cancel the table's merge in flight with plan id
    `cancel_plan`. A request asks for exactly one of these."""

    request_id: str
    table: str
    requested_at: datetime
    rule: str | None = None
    segment_ids: tuple[str, ...] = ()
    delete_sub_partition: str | None = None
    merging: bool | None = None
    cancel_plan: str | None = None


@dataclass(frozen=True, slots=True)
class ConfigApplied:
    """A table's new config, published for the running job to adopt."""

    table: str
    config_version: int
    settings_json: str
    applied_at: datetime


@dataclass(frozen=True, slots=True)
class ProducerAdvice:
    """Advice to a table's producers: unmerged small loads pile up (see `stream.advice`)."""

    table: str
    reason: str
    small_segments: int
    ceiling: int
    median_segment_bytes: int
    min_segment_bytes: int
    batch_interval_seconds: int | None  # None: the load rate is not known
    advised_at: datetime

"""The events the compactor consumes and produces, as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from compactor.domain import MergePlan, Segment


class SegmentAction(StrEnum):
    """What a SegmentCompleted event reports."""

    CREATE = "CREATE"
    ADD_SUB_PARTITION = "ADD_SUB_PARTITION"
    REFRESH_SUB_PARTITION = "REFRESH_SUB_PARTITION"


class MergeStatus(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"


@dataclass(frozen=True, slots=True)
class SegmentCompleted:
    """A segment is complete in Delta (a load, or the output of a merge/refresh)."""

    segment: Segment
    produced_at: datetime
    config_version: int = 1
    plan_id: str | None = None
    action: SegmentAction = SegmentAction.CREATE


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


@dataclass(frozen=True, slots=True)
class CompactionRequested:
    """Run `rule` once now, or merge exactly `segment_ids` (a manual merge)."""

    request_id: str
    table: str
    requested_at: datetime
    rule: str | None = None
    segment_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ConfigApplied:
    """A table's new config, published for the running job to adopt."""

    table: str
    config_version: int
    settings_json: str
    applied_at: datetime

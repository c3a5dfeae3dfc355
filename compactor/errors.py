"""Every error the compactor raises derives from `CompactorError`.

Each leaf says what failed; its docstring says what the caller should do.
Dead-letter reasons, the one vocabulary for why an event was refused, live
here too, so the codec, admission and the docs (docs/operating/failures.md) share them.
"""

from __future__ import annotations

from enum import StrEnum


class DeadLetterReason(StrEnum):
    """Why an event went to the dead-letter topic (its `compactor.dead_letter.reason` header)."""

    UNDECODABLE = "undecodable"
    UNKNOWN_SCHEMA = "unknown_schema"
    WRONG_EVENT_TYPE = "wrong_event_type"
    MISSING_FIELD = "missing_field"
    INVALID_TABLE_NAME = "invalid_table_name"  # includes names that would escape the warehouse
    INVALID_RANGE = "invalid_range"
    INVALID_VALUE = "invalid_value"
    UNKNOWN_TABLE = "unknown_table"
    OVERLAPPING_RANGE = "overlapping_range"
    DUPLICATE_SEGMENT_ID = "duplicate_segment_id"
    ROWS_NOT_IN_DELTA = "rows_not_in_delta"
    UNKNOWN_SEGMENT = "unknown_segment"
    RANGE_MISMATCH = "range_mismatch"
    MANUAL_MERGE_REJECTED = "manual_merge_rejected"
    UNKNOWN_RULE = "unknown_rule"
    INVALID_CONFIG = "invalid_config"
    WRONG_PARTITION = "wrong_partition"  # a sharded job got an event of another shard's table


class CompactorError(Exception):
    """Root of the compactor's errors; catch this to handle any of them."""


class DependencyResolutionError(CompactorError):
    """JVM jars could not be resolved: check Maven and network access to Maven Central."""


class ServiceUnreachable(CompactorError):
    """A service the command needs (the Kafka broker) did not answer: check its address and the network."""


class LeaseHeld(CompactorError):
    """Another `compactor run` holds the controller lease of this warehouse and topic, or this
    job's identity (its static member name in the lease's group)."""


class MergeCancelled(CompactorError):
    """A merge ran past its time bound, or an operator cancelled it (`by_operator`); it is
    tried again after its cool-down."""

    def __init__(self, why: str, by_operator: bool = False) -> None:
        super().__init__(why)
        self.by_operator = by_operator


class Fenced(CompactorError):
    """The shard's lease was lost: its job commits nothing more for it (the next holder plans
    the merge again)."""


class BrokerStartError(CompactorError):
    """The local Kafka broker did not come up: read the broker log it names."""


class ConfigError(CompactorError):
    """The YAML config is invalid: fix the key the message names and reload."""


class Rejected(CompactorError):
    """An event cannot be accepted: it goes to the dead-letter topic with `reason`."""

    def __init__(self, reason: DeadLetterReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class EventDecodeError(Rejected):
    """An event's bytes are not a valid event: route it to the dead-letter topic."""


class ShardCountMismatch(ConfigError):
    """`operations.shards` (or the segments topic's partition count) differs from what the
    warehouse's jobs run with: stop every job, then start one with `compactor run --reshard`."""


class InvalidSegmentError(CompactorError):
    """A segment (from an event or a file) is inconsistent: reject that record."""


class InvalidRequest(CompactorError):
    """An operator's request names a value no request may carry: nothing was asked of the job;
    fix the value the message names."""


class ManualMergeError(CompactorError):
    """A requested manual merge is invalid: nothing was changed; fix the ids named."""


class DeliveryError(CompactorError):
    """Kafka did not acknowledge a produced event: the batch must be retried."""


class RangeNotRead(CompactorError):
    """The driver's Kafka client could not read a micro-batch's offsets (Spark reads them)."""


class TableNotFoundError(CompactorError):
    """No Delta table exists for the named table under the warehouse."""


class EventEncodeError(CompactorError):
    """A record does not fit its Avro schema: fix the field the message names."""


class UnsupportedTableFeature(CompactorError):
    """The Delta table uses a feature a merge cannot preserve: turn it off or leave the table out."""


class ContentMismatch(CompactorError):
    """A rewrite's output does not hold exactly its inputs' rows (its certificate): not committed."""


class CommitConflict(CompactorError):
    """Another writer committed first (Delta's optimistic concurrency): retry against the new version."""


class StalePlan(CompactorError):
    """A plan's inputs changed under it (a concurrent writer): re-plan from what Delta holds now."""


class LogGap(CompactorError):
    """Commits asked for are no longer in the Delta log (log cleanup removed them): reconcile instead."""

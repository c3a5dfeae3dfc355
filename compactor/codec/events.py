"""Events <-> Avro records: the mapping between domain events and the schemas in `schemas/`.

Decoding validates what Avro cannot: names, ids and ranges; a bad event raises
`EventDecodeError` with the dead-letter reason, never a crash.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from compactor.codec.framing import SchemaSet
from compactor.domain.events import (
    CompactionRequested,
    ConfigApplied,
    MergeResult,
    MergeStatus,
    ProducerAdvice,
    SegmentAction,
    SegmentCompleted,
)
from compactor.domain.plans import validate_plan_id
from compactor.domain.segments import (
    TABLE_NAME,
    Origin,
    Segment,
    SegmentState,
    TimeRange,
    utc,
    validate_segment_id,
    validate_table_name,
)
from compactor.errors import CompactorError, DeadLetterReason, EventDecodeError

SEGMENT_COMPLETED = "io.compactor.events.SegmentCompleted"
MERGE_RESULT = "io.compactor.events.MergeResult"
COMPACTION_REQUESTED = "io.compactor.events.CompactionRequested"
CONFIG_APPLIED = "io.compactor.events.ConfigApplied"
PRODUCER_ADVICE = "io.compactor.events.ProducerAdvice"


class Codec(SchemaSet):
    """Encode and decode the compactor's events."""

    def encode_segment_completed(self, event: SegmentCompleted) -> bytes:
        s = event.segment
        return self.encode(
            SEGMENT_COMPLETED,
            {
                "table": s.table,
                "segment_id": s.id,
                "start": s.start,
                "end": s.end,
                "sub_partitions": sorted(s.sub_partitions),
                "sub_partition_states": {v: str(st) for v, st in s.sub_partition_states},
                "indexes": sorted(s.indexes),
                "action": event.action.value,
                "records": s.records,
                "bytes": s.bytes,
                "schema_version": s.schema_version,
                "config_version": event.config_version,
                "level": s.level,
                "built_with": s.built_with,
                "origin": s.origin.name,
                "plan_id": event.plan_id,
                "loaded_at": s.loaded_at,
                "produced_at": event.produced_at,
            },
        )

    def decode_input(self, data: bytes) -> SegmentCompleted | CompactionRequested | ConfigApplied:
        """An event of the segments topic: a completion, an operator's request or a new config."""
        name, record = self.decode_any(None, data)
        if name == SEGMENT_COMPLETED:
            return self._segment_completed(record)
        if name == COMPACTION_REQUESTED:
            return self._compaction_requested(record)
        if name == CONFIG_APPLIED:
            try:
                validate_table_name(record["table"])
            except CompactorError as exc:
                raise EventDecodeError(DeadLetterReason.INVALID_VALUE, str(exc)) from None
            return ConfigApplied(
                record["table"], record["config_version"], record["settings_json"], record["applied_at"]
            )
        raise EventDecodeError(
            DeadLetterReason.WRONG_EVENT_TYPE, f"{name} does not belong on the segments topic"
        )

    def decode_segment_completed(self, data: bytes) -> SegmentCompleted:
        return self._segment_completed(self.decode(SEGMENT_COMPLETED, data))

    def _segment_completed(self, r: dict[str, Any]) -> SegmentCompleted:
        empty = [k for k in ("table", "segment_id") if not r[k]]
        if empty:
            raise EventDecodeError(
                DeadLetterReason.MISSING_FIELD, f"required field(s) {', '.join(empty)} missing (empty)"
            )
        if not TABLE_NAME.match(r["table"]):
            raise EventDecodeError(
                DeadLetterReason.INVALID_TABLE_NAME,
                f"table {r['table']!r} is not a plain name (letters, digits, '_'); refused",
            )
        if r["end"] <= r["start"]:
            raise EventDecodeError(
                DeadLetterReason.INVALID_RANGE,
                f"segment {r['segment_id']}: end {r['end'].isoformat()} is not after start {r['start'].isoformat()}",
            )
        try:
            segment = Segment(
                id=r["segment_id"],
                table=r["table"],
                range=TimeRange(r["start"], r["end"]),
                loaded_at=r["loaded_at"],
                records=r["records"],
                bytes=r["bytes"],
                sub_partitions=frozenset(r["sub_partitions"]),
                indexes=frozenset(r["indexes"]),
                schema_version=r["schema_version"],
                level=r["level"],
                origin=Origin[r["origin"]],
                built_with=r["built_with"],
                sub_partition_states=tuple(
                    (v, SegmentState(st)) for v, st in r["sub_partition_states"].items()
                ),
            )
        except CompactorError as exc:
            raise EventDecodeError(DeadLetterReason.INVALID_VALUE, str(exc)) from None
        action = SegmentAction(r["action"])
        return SegmentCompleted(segment, r["produced_at"], r["config_version"], r["plan_id"], action)

    def encode_compaction_requested(self, request: CompactionRequested) -> bytes:
        return self.encode(
            COMPACTION_REQUESTED,
            {
                "request_id": request.request_id,
                "table": request.table,
                "rule": request.rule,
                "segment_ids": list(request.segment_ids),
                "delete_sub_partition": request.delete_sub_partition,
                "merging": request.merging,
                "cancel_plan": request.cancel_plan,
                "requested_at": request.requested_at,
            },
        )

    def _compaction_requested(self, r: dict[str, Any]) -> CompactionRequested:
        try:
            validate_table_name(r["table"])
            for sid in r["segment_ids"]:
                validate_segment_id(sid)
            if r["cancel_plan"] is not None:
                validate_plan_id(r["cancel_plan"])
        except CompactorError as exc:
            raise EventDecodeError(DeadLetterReason.INVALID_VALUE, str(exc)) from None
        asked = {
            "rule": r["rule"],
            "segment_ids": r["segment_ids"] or None,
            "delete_sub_partition": r["delete_sub_partition"],
            "merging": r["merging"],
        }
        if r["cancel_plan"] is not None:
            # a cancel that also asked for work would start what it means to stop: refuse it whole
            extra = ", ".join(f"{k}={v!r}" for k, v in asked.items() if v is not None)
            if extra:
                raise EventDecodeError(
                    DeadLetterReason.INVALID_VALUE,
                    f"request {r['request_id']} for table {r['table']}: cancel_plan={r['cancel_plan']!r} "
                    f"comes with {extra}; a cancel names the plan to cancel and nothing else",
                )
        elif sum(v is not None for v in asked.values()) != 1:
            raise EventDecodeError(
                DeadLetterReason.INVALID_VALUE,
                "a request names exactly one of a rule, segment ids, a sub-partition value to delete, "
                "a merging switch or a plan to cancel",
            )
        return CompactionRequested(
            r["request_id"],
            r["table"],
            r["requested_at"],
            r["rule"],
            tuple(r["segment_ids"]),
            r["delete_sub_partition"],
            r["merging"],
            r["cancel_plan"],
        )

    def encode_config_applied(self, event: ConfigApplied) -> bytes:
        return self.encode(
            CONFIG_APPLIED,
            {
                "table": event.table,
                "config_version": event.config_version,
                "settings_json": event.settings_json,
                "applied_at": event.applied_at,
            },
        )

    def encode_merge_result(self, result: MergeResult) -> bytes:
        plan = result.plan
        counts = ("records_in", "records_out", "bytes_in", "bytes_out", "duration_ms", "invalid_rows_removed")
        outcome = ("error", "table_version", "data_change", "produced_at", "layout")
        return self.encode(
            MERGE_RESULT,
            plan.summary()
            | {k: getattr(result, k) for k in (*counts, *outcome)}
            | {
                "output": _output(result.outputs[0] if result.outputs else plan.output),
                "outputs": [_output(s) for s in result.outputs],
                "status": result.status.value,
                "certificate": result.certificate.to_dict() if result.certificate else None,
            },
        )

    def encode_producer_advice(self, advice: ProducerAdvice) -> bytes:
        return self.encode(PRODUCER_ADVICE, dataclasses.asdict(advice))

    def decode_producer_advice(self, data: bytes) -> ProducerAdvice:
        record = self.decode(PRODUCER_ADVICE, data)
        return ProducerAdvice(**record | {"advised_at": utc(record["advised_at"])})

    def decode_merge_result(self, data: bytes) -> dict[str, Any]:
        """Merge results stay dicts for consumers: they need no domain objects."""
        record = self.decode(MERGE_RESULT, data)
        record["status"] = MergeStatus(record["status"])
        return record


def _output(segment: Segment) -> dict[str, Any]:
    return {
        "segment_id": segment.id,
        "start": segment.start,
        "end": segment.end,
        "sub_partitions": sorted(segment.sub_partitions),
    }


@cache
def default_codec() -> Codec:
    return Codec()

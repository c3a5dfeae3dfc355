"""Avro encoding of events with fastavro, in Avro single-object encoding.

Every message is `C3 01` + the writer schema's 8-byte CRC-64-AVRO fingerprint +
the Avro binary body, so a reader knows which schema wrote it and can resolve
older schema versions to the current one. Schemas are loaded from the `.avsc`
files in `schemas/` (older versions under `schemas/history/`): they are the
single source. Any decoding problem raises `EventDecodeError` with a reason.
"""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from compactor.domain import (
    TABLE_NAME,
    Origin,
    Segment,
    SegmentState,
    TimeRange,
    validate_segment_id,
    validate_table_name,
)
from compactor.errors import CompactorError, EventDecodeError, EventEncodeError
from compactor.events import (
    CompactionRequested,
    ConfigApplied,
    MergeResult,
    MergeStatus,
    SegmentAction,
    SegmentCompleted,
)

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8
SEGMENT_COMPLETED = "io.compactor.events.SegmentCompleted"
MERGE_RESULT = "io.compactor.events.MergeResult"
COMPACTION_REQUESTED = "io.compactor.events.CompactionRequested"
CONFIG_APPLIED = "io.compactor.events.ConfigApplied"

# Reasons carried in EventDecodeError (and the dead-letter header).
UNDECODABLE = "undecodable"
UNKNOWN_SCHEMA = "unknown_schema"
WRONG_EVENT_TYPE = "wrong_event_type"
INVALID_VALUE = "invalid_value"
MISSING_FIELD = "missing_field"
INVALID_TABLE_NAME = "invalid_table_name"  # includes names that would escape the warehouse
INVALID_RANGE = "invalid_range"


def schemas_dir() -> Path:
    """$COMPACTOR_SCHEMAS_DIR, the copy inside an installed package, or the repo's `schemas/`."""
    configured = os.environ.get("COMPACTOR_SCHEMAS_DIR")
    if configured:
        return Path(configured)
    packaged = Path(__file__).parent / "schemas"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "schemas"


class Codec:
    """Encode with the current schema of each event; decode any known version."""

    def __init__(self, directory: Path | None = None) -> None:
        directory = directory or schemas_dir()
        self.current: dict[str, dict[str, Any]] = {}
        self.writers: dict[bytes, dict[str, Any]] = {}
        files = sorted(directory.glob("*.avsc")) + sorted(directory.glob("history/*.avsc"))
        if not files:
            raise CompactorError(f"no Avro schemas (*.avsc) found in {directory}")
        for path in files:
            parsed = fastavro.parse_schema(json.loads(path.read_text()))
            if not isinstance(parsed, dict):
                raise CompactorError(f"{path}: an event schema must be an Avro record")
            key = bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
            self.writers[key] = parsed
            if path.parent == directory:
                self.current[parsed["name"]] = parsed

    def encode(self, name: str, record: dict[str, Any]) -> bytes:
        schema = self.current[name]
        key = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
        buffer = io.BytesIO()
        buffer.write(MAGIC + key)
        try:
            fastavro.schemaless_writer(buffer, schema, record, strict_allow_default=True)
        except (ValueError, TypeError, KeyError) as exc:
            raise EventEncodeError(f"{name.rsplit('.', 1)[-1]}: {exc}") from None
        return buffer.getvalue()

    def decode(self, name: str | None, data: bytes) -> dict[str, Any]:
        """Decode `data`; with `name`, refuse any other event type."""
        return self._decode(name, data)[1]

    def _decode(self, name: str | None, data: bytes) -> tuple[str, dict[str, Any]]:
        if not isinstance(data, bytes | bytearray) or len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise EventDecodeError(UNDECODABLE, "not an Avro single-object message (missing C3 01 marker)")
        writer = self.writers.get(bytes(data[2:HEADER_LEN]))
        if writer is None:
            raise EventDecodeError(
                UNKNOWN_SCHEMA, f"writer schema fingerprint {data[2:HEADER_LEN].hex()} is not known"
            )
        if name is not None and writer["name"] != name:
            raise EventDecodeError(WRONG_EVENT_TYPE, f"expected {name}, got {writer['name']}")
        name = str(writer["name"])
        body = io.BytesIO(data[HEADER_LEN:])
        try:
            record = fastavro.schemaless_reader(body, writer, self.current[name])
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise EventDecodeError(UNDECODABLE, f"Avro body does not match {name}: {exc!r}") from None
        if body.read(1):
            raise EventDecodeError(UNDECODABLE, "trailing bytes after the Avro record")
        if not isinstance(record, dict):
            raise EventDecodeError(UNDECODABLE, f"expected a record, got {type(record).__name__}")
        return name, record

    # -- domain events -------------------------------------------------------

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
        name, record = self._decode(None, data)
        if name == SEGMENT_COMPLETED:
            return self._segment_completed(record)
        if name == COMPACTION_REQUESTED:
            return self._compaction_requested(record)
        if name == CONFIG_APPLIED:
            try:
                validate_table_name(record["table"])
            except CompactorError as exc:
                raise EventDecodeError(INVALID_VALUE, str(exc)) from None
            return ConfigApplied(
                record["table"], record["config_version"], record["settings_json"], record["applied_at"]
            )
        raise EventDecodeError(WRONG_EVENT_TYPE, f"{name} does not belong on the segments topic")

    def decode_segment_completed(self, data: bytes) -> SegmentCompleted:
        return self._segment_completed(self.decode(SEGMENT_COMPLETED, data))

    def _segment_completed(self, r: dict[str, Any]) -> SegmentCompleted:
        empty = [k for k in ("table", "segment_id") if not r[k]]
        if empty:
            raise EventDecodeError(MISSING_FIELD, f"required field(s) {', '.join(empty)} missing (empty)")
        if not TABLE_NAME.match(r["table"]):
            raise EventDecodeError(
                INVALID_TABLE_NAME,
                f"table {r['table']!r} is not a plain name (letters, digits, '_'); refused",
            )
        if r["end"] <= r["start"]:
            raise EventDecodeError(
                INVALID_RANGE,
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
                schema_version=r["schema_version"],
                level=r["level"],
                origin=Origin[r["origin"]],
                built_with=r["built_with"],
                sub_partition_states=tuple(
                    (v, SegmentState(st)) for v, st in r["sub_partition_states"].items()
                ),
            )
        except CompactorError as exc:
            raise EventDecodeError(INVALID_VALUE, str(exc)) from None
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
                "requested_at": request.requested_at,
            },
        )

    def _compaction_requested(self, r: dict[str, Any]) -> CompactionRequested:
        try:
            validate_table_name(r["table"])
            for sid in r["segment_ids"]:
                validate_segment_id(sid)
        except CompactorError as exc:
            raise EventDecodeError(INVALID_VALUE, str(exc)) from None
        if (r["rule"] is None) == (not r["segment_ids"]):
            raise EventDecodeError(
                INVALID_VALUE, "a request names either a rule or segment ids, not both or neither"
            )
        return CompactionRequested(
            r["request_id"], r["table"], r["requested_at"], r["rule"], tuple(r["segment_ids"])
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
        return self.encode(
            MERGE_RESULT,
            {
                "plan_id": plan.plan_id,
                "table": plan.table,
                "rule": plan.rule,
                "level": plan.level,
                "pool": plan.pool,
                "inputs": list(plan.input_ids),
                "output": _output(result.outputs[0] if result.outputs else plan.output),
                "outputs": [_output(s) for s in result.outputs],
                "records_in": result.records_in,
                "records_out": result.records_out,
                "bytes_in": result.bytes_in,
                "bytes_out": result.bytes_out,
                "duration_ms": result.duration_ms,
                "invalid_rows_removed": result.invalid_rows_removed,
                "status": result.status.value,
                "error": result.error,
                "table_version": result.table_version,
                "data_change": result.data_change,
                "produced_at": result.produced_at,
            },
        )

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


def now_utc() -> datetime:
    return datetime.now(UTC)

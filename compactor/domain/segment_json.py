"""Segments to and from JSON-friendly dicts (commit metadata, CLI files)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from compactor.domain.segments import Origin, Segment, SegmentState, TimeRange
from compactor.errors import InvalidSegmentError

REQUIRED = ("id", "table", "start", "end")


def _instant(record: Mapping[str, Any], key: str) -> datetime:
    value = record[key]
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise InvalidSegmentError(f"field {key!r}: {value!r} is not an ISO 8601 time") from None


def segment_from_dict(record: Mapping[str, Any]) -> Segment:
    """Parse one segment record; errors name the field, the value and the problem."""
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise InvalidSegmentError(f"missing required field(s) {', '.join(missing)}")
    start, end = _instant(record, "start"), _instant(record, "end")
    if end <= start:
        raise InvalidSegmentError(f"field 'end': {record['end']!r} is not after start {record['start']!r}")
    try:
        return Segment(
            id=str(record["id"]),
            table=str(record["table"]),
            range=TimeRange(start, end),
            loaded_at=_instant(record, "loaded_at") if "loaded_at" in record else end,
            records=int(record.get("records", 0)),
            bytes=int(record.get("bytes", 0)),
            sub_partitions=frozenset(str(v) for v in record.get("sub_partitions", ())),
            indexes=frozenset(str(v) for v in record.get("indexes", ())),
            state=SegmentState(record.get("state", "ONLINE")),
            schema_version=int(record.get("schema_version", 1)),
            level=int(record.get("level", 0)),
            origin=Origin(record.get("origin", "load")),
            built_with=str(record.get("built_with", "")),
            deleted=int(record.get("deleted", 0)),
            sub_partition_states=tuple(
                (str(v), SegmentState(st)) for v, st in dict(record.get("sub_partition_states", {})).items()
            ),
        )
    except (TypeError, ValueError) as exc:
        raise InvalidSegmentError(f"invalid value: {exc}") from None


def segment_to_dict(segment: Segment) -> dict[str, Any]:
    """The inverse of `segment_from_dict`: every field, times in ISO 8601."""
    return {
        "id": segment.id,
        "table": segment.table,
        "start": segment.start.isoformat(),
        "end": segment.end.isoformat(),
        "records": segment.records,
        "bytes": segment.bytes,
        "sub_partitions": sorted(segment.sub_partitions),
        "indexes": sorted(segment.indexes),
        "loaded_at": segment.loaded_at.isoformat(),
        "state": str(segment.state),
        "schema_version": segment.schema_version,
        "level": segment.level,
        "origin": str(segment.origin),
        "sub_partition_states": {v: str(st) for v, st in segment.sub_partition_states},
        "built_with": segment.built_with,
        **({"deleted": segment.deleted} if segment.deleted else {}),  # absent from older records
    }

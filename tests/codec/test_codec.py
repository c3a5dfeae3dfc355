"""Codec: round trips, schema evolution, and one domain error for every bad input."""

from __future__ import annotations

import dataclasses
import io
import json
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form

from compactor.codec.events import SEGMENT_COMPLETED, Codec
from compactor.codec.framing import MAGIC, schemas_dir
from compactor.domain.certificate import Certificate, Fingerprint
from compactor.domain.events import CompactionRequested, MergeResult, MergeStatus, SegmentCompleted
from compactor.domain.plans import make_plan
from compactor.domain.segments import Origin, Segment, TimeRange
from compactor.errors import DeadLetterReason, EventDecodeError, EventEncodeError

T0 = datetime(2024, 1, 1, tzinfo=UTC)
T1 = datetime(2024, 1, 2, tzinfo=UTC)


def segment(sid: str = "s1", **kw: object) -> Segment:
    return Segment(sid, "sales", TimeRange(T0, T1), loaded_at=T1, records=5, bytes=99, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


def valid_record() -> dict[str, object]:
    return {
        "table": "sales", "segment_id": "s1", "start": T0, "end": T1, "sub_partitions": ["eu"],
        "records": 5, "bytes": 99, "schema_version": 1, "config_version": 1, "level": 0,
        "origin": "LOAD", "plan_id": None, "loaded_at": T1, "produced_at": T1,
    }  # fmt: skip


def test_segment_completed_round_trip(codec: Codec) -> None:
    event = SegmentCompleted(
        segment(sub_partitions=frozenset({"eu", "us"}), origin=Origin.MERGE), T1, 3, "p1"
    )
    assert codec.decode_segment_completed(codec.encode_segment_completed(event)) == event


def test_merge_result_round_trip(codec: Codec) -> None:
    plan = make_plan(
        "sales",
        "auto_merge",
        [segment("a"), Segment("b", "sales", TimeRange(T1, datetime(2024, 1, 3, tzinfo=UTC)), loaded_at=T1)],
        level="week",
    )
    result = MergeResult(plan, MergeStatus.SUCCEEDED, 5, 5, 99, 80, 1200, T1, table_version=7)
    decoded = codec.decode_merge_result(codec.encode_merge_result(result))
    assert decoded["plan_id"] == plan.plan_id
    assert decoded["inputs"] == ["a", "b"]
    assert decoded["output"]["segment_id"] == plan.output.id
    assert (decoded["status"], decoded["table_version"], decoded["level"], decoded["pool"]) == (
        MergeStatus.SUCCEEDED,
        7,
        "week",
        None,
    )


def crc64_avro(text: str) -> int:
    """The Avro specification's CRC-64-AVRO (Rabin) fingerprint, as its reference code computes it."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in text.encode():
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def test_messages_use_single_object_encoding(codec: Codec) -> None:
    """Avro's single-object encoding: C3 01, the writer schema's fingerprint (CRC-64-AVRO of its
    canonical form, little-endian), then the record's Avro body and nothing more."""
    schema = fastavro.parse_schema(json.loads((schemas_dir() / "segment_completed.avsc").read_text()))
    data = codec.encode(SEGMENT_COMPLETED, valid_record())
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == struct.pack("<Q", crc64_avro(to_parsing_canonical_form(schema)))
    body = io.BytesIO(data[10:])
    defaults = {"sub_partition_states": {}, "indexes": [], "action": "CREATE", "built_with": ""}
    assert fastavro.schemaless_reader(body, schema, None) == valid_record() | defaults
    assert body.read() == b"", "no bytes after the record"


def test_old_writer_schema_is_resolved_to_the_current_one(tmp_path: Path) -> None:
    current = json.loads((schemas_dir() / "segment_completed.avsc").read_text())
    old = dict(current, fields=[f for f in current["fields"] if f["name"] not in {"sub_partitions", "level"}])
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "segment_completed.v0.avsc").write_text(json.dumps(old))
    (tmp_path / "segment_completed.avsc").write_text(json.dumps(current))
    codec = Codec(tmp_path)
    record = {k: v for k, v in valid_record().items() if k not in {"sub_partitions", "level"}}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(old), record)
    key = next(k for k, s in codec.writers.items() if len(s["fields"]) == len(old["fields"]))
    event = codec.decode_segment_completed(MAGIC + key + body.getvalue())
    assert event.segment.sub_partitions == frozenset() and event.segment.level == 0


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "undecodable"),
        (b"not avro at all", "undecodable"),
        (MAGIC + b"\x00" * 8 + b"\x02", "unknown_schema"),
    ],
)
def test_bad_bytes_raise_one_domain_error(codec: Codec, data: bytes, reason: str) -> None:
    with pytest.raises(EventDecodeError) as err:
        codec.decode_segment_completed(data)
    assert err.value.reason == reason


def test_truncated_body_is_undecodable(codec: Codec) -> None:
    data = codec.encode(SEGMENT_COMPLETED, valid_record())
    with pytest.raises(EventDecodeError) as err:
        codec.decode_segment_completed(data[:-5])
    assert err.value.reason == "undecodable"


def test_merge_result_bytes_are_not_a_segment_event(codec: Codec) -> None:
    plan = make_plan("sales", "auto_merge", [segment("a"), segment("b")])
    data = codec.encode_merge_result(MergeResult(plan, MergeStatus.FAILED, 1, 0, 1, 0, 5, T1, "boom"))
    with pytest.raises(EventDecodeError) as err:
        codec.decode_segment_completed(data)
    assert err.value.reason == "wrong_event_type"


@pytest.mark.parametrize(
    ("field", "value", "reason_text"),
    [
        ("end", T0, "not after start"),
        ("table", "../etc", "not a plain name"),
        ("segment_id", "a/b", "segment id"),
        ("records", -1, "negative"),
    ],
)
def test_semantically_invalid_events_name_the_problem(
    codec: Codec, field: str, value: object, reason_text: str
) -> None:
    record = valid_record() | {field: value}
    with pytest.raises(EventDecodeError) as err:
        codec.decode_segment_completed(codec.encode(SEGMENT_COMPLETED, record))
    assert err.value.reason == {"end": "invalid_range", "table": "invalid_table_name"}.get(
        field, "invalid_value"
    )
    assert reason_text in str(err.value)


def test_encoding_a_record_missing_a_required_field_names_it(codec: Codec) -> None:
    record = valid_record()
    del record["records"]
    with pytest.raises(EventEncodeError, match="records"):
        codec.encode(SEGMENT_COMPLETED, record)


def test_version_1_events_already_on_the_topic_still_decode(codec: Codec) -> None:
    old = fastavro.parse_schema(
        json.loads((schemas_dir() / "history" / "segment_completed.v1.avsc").read_text())
    )
    record = {k: v for k, v in valid_record().items()}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, old, record)
    key = bytes.fromhex(
        fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(old), "CRC-64-AVRO")
    )
    event = codec.decode_segment_completed(MAGIC + key + body.getvalue())
    assert event.action.value == "CREATE"
    assert event.segment.sub_partitions == frozenset({"eu"}) and event.segment.sub_partition_states == ()


def test_sub_partition_events_round_trip(codec: Codec) -> None:
    from compactor.domain.events import SegmentAction
    from compactor.domain.segments import SegmentState

    s = segment(sub_partitions=frozenset({"eu", "us"}), sub_partition_states=(("us", SegmentState.LOADING),))
    event = SegmentCompleted(s, T1, action=SegmentAction.ADD_SUB_PARTITION)
    decoded = codec.decode_segment_completed(codec.encode_segment_completed(event))
    assert decoded == event
    assert decoded.segment.sub_partition_state("us") is SegmentState.LOADING
    assert decoded.segment.sub_partition_state("eu") is SegmentState.ONLINE


def test_an_empty_required_field_is_missing(codec: Codec) -> None:
    with pytest.raises(EventDecodeError) as err:
        codec.decode_segment_completed(codec.encode(SEGMENT_COMPLETED, valid_record() | {"segment_id": ""}))
    assert err.value.reason == "missing_field" and "segment_id" in err.value.detail


def _history_schema(name: str) -> dict[str, object]:
    parsed = fastavro.parse_schema(json.loads((schemas_dir() / "history" / name).read_text()))
    assert isinstance(parsed, dict)
    return parsed


def _written_by(schema: str, record: dict[str, Any], without: str) -> bytes:
    """A decoded merge result as a producer on an older schema (lacking `without`) wrote it."""
    writer = _history_schema(schema)
    old = {k: v for k, v in record.items() if k != without} | {"status": record["status"].value}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, writer, old)
    key = bytes.fromhex(
        fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(writer), "CRC-64-AVRO")
    )
    return MAGIC + key + body.getvalue()


def _merge_result(codec: Codec, data_change: bool) -> MergeResult:
    later = Segment("b", "sales", TimeRange(T1, datetime(2024, 1, 3, tzinfo=UTC)), loaded_at=T1)
    plan = make_plan("sales", "auto_merge", [segment("a"), later])
    return MergeResult(
        plan, MergeStatus.SUCCEEDED, 2, 2, 10, 8, 5, T1, table_version=3, data_change=data_change
    )


@pytest.mark.parametrize("data_change", [True, False])
def test_merge_results_say_whether_the_commit_changed_data(codec: Codec, data_change: bool) -> None:
    decoded = codec.decode_merge_result(codec.encode_merge_result(_merge_result(codec, data_change)))
    assert decoded["data_change"] is data_change


def test_version_2_merge_results_read_as_data_changes(codec: Codec) -> None:
    """Results written before data_change existed came from commits that all changed data."""
    record = codec.decode_merge_result(codec.encode_merge_result(_merge_result(codec, False)))
    decoded = codec.decode_merge_result(_written_by("merge_result.v2.avsc", record, without="data_change"))
    assert decoded["data_change"] is True and decoded["plan_id"] == record["plan_id"]


def test_a_reader_with_the_version_2_schema_still_reads_version_3_results(codec: Codec) -> None:
    """Old consumers keep working: Avro resolution drops the field their schema lacks."""
    data = codec.encode_merge_result(_merge_result(codec, False))
    writer = codec.writers[data[2:10]]
    old = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer, _history_schema("merge_result.v2.avsc"))
    assert isinstance(old, dict) and "data_change" not in old and old["records_out"] == 2


def test_indexes_round_trip_and_version_2_events_built_none(codec: Codec) -> None:
    s = segment(indexes=frozenset({"A", "B"}))
    event = SegmentCompleted(s, T1)
    assert codec.decode_segment_completed(codec.encode_segment_completed(event)).segment.indexes == {"A", "B"}
    v2 = _history_schema("segment_completed.v2.avsc")
    body = io.BytesIO()
    fastavro.schemaless_writer(body, v2, valid_record())
    key = bytes.fromhex(
        fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(v2), "CRC-64-AVRO")
    )
    assert codec.decode_segment_completed(MAGIC + key + body.getvalue()).segment.indexes == frozenset()


def test_merge_results_name_the_layout_their_rewrite_applied_and_version_3_reads_none(codec: Codec) -> None:
    ordered = dataclasses.replace(_merge_result(codec, False), layout="zorder(customer_id,country)")
    assert (
        codec.decode_merge_result(codec.encode_merge_result(ordered))["layout"]
        == "zorder(customer_id,country)"
    )
    record = codec.decode_merge_result(codec.encode_merge_result(_merge_result(codec, False)))
    assert record["layout"] is None
    assert (
        codec.decode_merge_result(_written_by("merge_result.v3.avsc", record, without="layout"))["layout"]
        is None
    )


def _cancel(**asked: Any) -> CompactionRequested:
    return CompactionRequested("r1", "sales", T1, cancel_plan="0123456789abcdef01234567", **asked)


def test_a_cancel_round_trips_and_names_its_plan_only(codec: Codec) -> None:
    cancel = _cancel()
    decoded = codec.decode_input(codec.encode_compaction_requested(cancel))
    assert decoded == cancel and isinstance(decoded, CompactionRequested)
    assert (decoded.rule, decoded.segment_ids, decoded.merging) == (None, (), None)
    switch = CompactionRequested("r2", "sales", T1, merging=False)
    decoded_switch = codec.decode_input(codec.encode_compaction_requested(switch))
    assert isinstance(decoded_switch, CompactionRequested) and decoded_switch.cancel_plan is None


def test_version_3_requests_still_decode_and_version_3_readers_ignore_a_cancel(codec: Codec) -> None:
    """Requests already on the topic decode with no plan to cancel. A reader on version 3 given
    the writer's schema (by a registry) drops the field: a request naming nothing, dead-lettered
    by a job on version 3 (which, without a registry, dead-letters the unknown schema instead)."""
    v3 = _history_schema("compaction_requested.v3.avsc")
    record = {
        "request_id": "r1", "table": "sales", "rule": None, "segment_ids": [],
        "delete_sub_partition": None, "merging": False, "requested_at": T1,
    }  # fmt: skip
    body = io.BytesIO()
    fastavro.schemaless_writer(body, v3, record)
    key = bytes.fromhex(
        fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(v3), "CRC-64-AVRO")
    )
    assert codec.decode_input(MAGIC + key + body.getvalue()) == CompactionRequested(
        "r1", "sales", T1, merging=False
    )
    data = codec.encode_compaction_requested(_cancel())
    old = fastavro.schemaless_reader(io.BytesIO(data[10:]), codec.writers[data[2:10]], v3)
    assert isinstance(old, dict) and "cancel_plan" not in old and old["request_id"] == "r1"


@pytest.mark.parametrize(
    ("asked", "named"),
    [
        ({"rule": "minor"}, "rule='minor'"),
        ({"segment_ids": ("a", "b")}, "segment_ids=['a', 'b']"),
        ({"delete_sub_partition": "eu"}, "delete_sub_partition='eu'"),
        ({"merging": True}, "merging=True"),
        ({"rule": "minor", "merging": False}, "rule='minor', merging=False"),
    ],
)
def test_a_cancel_with_anything_else_names_what_came_with_it(
    codec: Codec, asked: dict[str, Any], named: str
) -> None:
    with pytest.raises(EventDecodeError) as err:
        codec.decode_input(codec.encode_compaction_requested(_cancel(**asked)))
    assert err.value.reason is DeadLetterReason.INVALID_VALUE
    assert err.value.detail == (
        f"request r1 for table sales: cancel_plan='0123456789abcdef01234567' comes with {named}; "
        "a cancel names the plan to cancel and nothing else"
    )


@pytest.mark.parametrize("plan_id", ["", "m-0123456789abcdef01234567", "0123456789ABCDEF01234567", "abc"])
def test_a_cancel_of_something_no_plan_id_looks_like_is_invalid(codec: Codec, plan_id: str) -> None:
    request = dataclasses.replace(_cancel(), cancel_plan=plan_id)
    with pytest.raises(EventDecodeError) as err:
        codec.decode_input(codec.encode_compaction_requested(request))
    assert err.value.reason is DeadLetterReason.INVALID_VALUE
    assert err.value.detail.startswith(
        f"plan id {plan_id!r} is invalid: a plan id is 24 lowercase hex digits"
    )


def test_merge_results_carry_their_certificate_and_version_4_reads_none(codec: Codec) -> None:
    proven = Certificate(Fingerprint(90, 0x6419DD44B592D329), Fingerprint(90, 0x6419DD44B592D329))
    certified = dataclasses.replace(_merge_result(codec, False), certificate=proven)
    record = codec.decode_merge_result(codec.encode_merge_result(certified))
    assert record["certificate"] == {
        "method": "xxhash64-rows-v1",
        "inputs": {"rows": 90, "digest": "6419dd44b592d329"},
        "output": {"rows": 90, "digest": "6419dd44b592d329"},
    }
    assert Certificate.from_dict(record["certificate"]) == proven
    plain = codec.decode_merge_result(codec.encode_merge_result(_merge_result(codec, False)))
    assert plain["certificate"] is None
    old = codec.decode_merge_result(_written_by("merge_result.v4.avsc", plain, without="certificate"))
    assert old["certificate"] is None and old["layout"] == plain["layout"]

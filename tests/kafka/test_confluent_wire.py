"""The Confluent wire format: what we write, confluent-kafka's own Avro deserializer reads, and
what its serializer writes, we read (the registry is confluent-kafka's in-memory one: no
Confluent-compatible registry can be installed here from PyPI or Maven Central)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from confluent_kafka.schema_registry import record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from compactor.codec.events import COMPACTION_REQUESTED, SEGMENT_COMPLETED, Codec, default_codec
from compactor.config.loading import load_config
from compactor.domain.events import CompactionRequested, SegmentCompleted
from compactor.errors import ConfigError, DeadLetterReason, EventDecodeError, ServiceUnreachable
from compactor.kafka.codecs import codec_for
from compactor.kafka.schema_registry import ConfluentRegistry
from compactor.kafka.settings import KafkaSettings
from tests.helpers.segments import seg

CONTEXT = SerializationContext("compactor.segments", MessageField.VALUE)
AT = datetime(2024, 2, 1, tzinfo=UTC)


def registry_codec(url: str = "mock://wire") -> Codec:
    config = load_config(
        {"kafka": {"encoding": "confluent", "schema_registry": {"url": url, "max.retries": 0}}}
    )
    return codec_for(KafkaSettings("b:1", config=config.kafka))


def test_confluents_deserializer_reads_what_we_write() -> None:
    codec = registry_codec()
    assert isinstance(codec.registry, ConfluentRegistry)
    event = SegmentCompleted(seg("d1", "2024-01-01", records=5, sub_partitions=frozenset({"eu"})), AT)
    data = codec.encode_segment_completed(event)
    registered = codec.registry.client.get_latest_version(SEGMENT_COMPLETED)  # subject: the record's name
    assert data[:5] == b"\x00" + registered.schema_id.to_bytes(4, "big")
    read = AvroDeserializer(codec.registry.client)(data, CONTEXT)
    assert (read["segment_id"], read["records"], read["sub_partitions"]) == ("d1", 5, ["eu"])
    assert codec.decode_input(data) == event


def test_we_read_what_confluents_serializer_writes_and_single_object_messages_still() -> None:
    codec = registry_codec()
    assert isinstance(codec.registry, ConfluentRegistry)
    schema = json.dumps(json.loads(codec.sources[SEGMENT_COMPLETED]))
    serialize = AvroSerializer(
        codec.registry.client, schema, conf={"subject.name.strategy": record_subject_name_strategy}
    )
    event = SegmentCompleted(seg("d2", "2024-01-02", records=7), AT)
    record = default_codec().decode(SEGMENT_COMPLETED, default_codec().encode_segment_completed(event))
    assert codec.decode_input(serialize(record, CONTEXT)) == event
    assert codec.decode_input(default_codec().encode_segment_completed(event)) == event, "both formats read"


def test_an_operators_cancel_travels_in_the_wire_format_both_ways() -> None:
    codec = registry_codec("mock://cancel")
    assert isinstance(codec.registry, ConfluentRegistry)
    cancel = CompactionRequested("r1", "sales", AT, cancel_plan="0123456789abcdef01234567")
    data = codec.encode_compaction_requested(cancel)
    registered = codec.registry.client.get_latest_version(COMPACTION_REQUESTED)
    assert data[:5] == b"\x00" + registered.schema_id.to_bytes(4, "big")
    read = AvroDeserializer(codec.registry.client)(data, CONTEXT)
    assert (read["cancel_plan"], read["merging"], read["rule"]) == ("0123456789abcdef01234567", None, None)
    assert codec.decode_input(data) == cancel
    serialize = AvroSerializer(
        codec.registry.client,
        json.dumps(json.loads(codec.sources[COMPACTION_REQUESTED])),
        conf={"subject.name.strategy": record_subject_name_strategy},
    )
    assert codec.decode_input(serialize(read, CONTEXT)) == cancel, "what Confluent's serializer writes"
    single_object = default_codec().encode_compaction_requested(cancel)
    assert codec.decode_input(single_object) == cancel, "and the other encoding too"


def test_unknown_ids_dead_letter_and_an_unreachable_registry_fails_the_batch() -> None:
    codec = registry_codec()
    with pytest.raises(EventDecodeError) as err:
        codec.decode_input(b"\x00\x00\x00\x03\xe7" + b"\x02")
    assert (err.value.reason, err.value.detail) == (
        DeadLetterReason.UNKNOWN_SCHEMA,
        "the registry has no schema id 999",
    )
    with pytest.raises(EventDecodeError) as err:
        default_codec().decode_input(b"\x00\x00\x00\x03\xe7" + b"\x02")
    assert err.value.reason is DeadLetterReason.UNDECODABLE
    assert "configure kafka.schema_registry" in err.value.detail
    down = registry_codec("http://127.0.0.1:1")
    with pytest.raises(ServiceUnreachable, match=r"schema registry http://127\.0\.0\.1:1: schema id 999"):
        down.decode_input(b"\x00\x00\x00\x03\xe7" + b"\x02")
    with pytest.raises(ConfigError, match=r"encoding confluent needs schema_registry\.url"):
        load_config({"kafka": {"encoding": "confluent"}})

"""The real job on the real broker with `kafka.encoding: confluent`: loads announced in the
Confluent wire format merge, and the results it publishes are read by confluent-kafka's own
Avro deserializer, as Kafka UI, kcat or Connect would read them (the registry is
confluent-kafka's in-memory one, shared in this process; none could be installed here)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from compactor.client.loader import load_segment, sample_rows
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.job.wiring import build_handler
from compactor.kafka.codecs import codec_for
from compactor.kafka.producer import EventProducer
from compactor.kafka.schema_registry import ConfluentRegistry
from compactor.kafka.settings import KafkaSettings
from tests.helpers.streaming import JobRunner, consume_all, make_kafka

pytestmark = pytest.mark.integration

FIRST = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday: seven days fill the week


def test_the_job_reads_and_writes_the_confluent_wire_format(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], warehouse: Path, tmp_path: Path
) -> None:
    topics = make_kafka(kafka_bootstrap, unique)
    config = load_config(
        {
            "defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]},
            "kafka": {"encoding": "confluent", "schema_registry": {"url": f"mock://{unique('registry')}"}},
        }
    )
    kafka = KafkaSettings(
        kafka_bootstrap, topics.segments_topic, topics.results_topic, topics.dead_letter_topic, config.kafka
    )
    codec = codec_for(kafka)
    assert isinstance(codec.registry, ConfluentRegistry)
    producer = EventProducer(kafka)
    for day in range(7):
        start = FIRST + timedelta(days=day)
        end = start + timedelta(days=1)
        rows = sample_rows(spark, start, end, 5, seed=day)
        load_segment(spark, warehouse, kafka, producer, "wire", rows, start, end, f"d{day}", codec=codec)
    handler = build_handler(spark, config, warehouse, kafka, producer=producer, codec=codec)
    JobRunner(spark, handler, kafka, tmp_path / "cp").run_until_quiet()

    assert handler.stats.dead_letters == 0 and handler.stats.merges == 1
    assert spark.read.format("delta").load(table_uri(warehouse, "wire")).count() == 35
    read = AvroDeserializer(codec.registry.client)
    (message,) = consume_all(kafka_bootstrap, kafka.results_topic)
    value = message.value()
    assert value is not None and value[:1] == b"\x00", "Confluent framing: 00 and a schema id"
    result = read(value, SerializationContext(kafka.results_topic, MessageField.VALUE))
    assert (result["table"], result["status"], result["records_in"], result["records_out"]) == (
        "wire", "SUCCEEDED", 35, 35
    )  # fmt: skip
    assert sorted(result["inputs"]) == [f"d{d}" for d in range(7)]
    announced = [m.value() for m in consume_all(kafka_bootstrap, kafka.segments_topic)]
    assert len(announced) == 8 and all(v is not None and v[:1] == b"\x00" for v in announced), (
        "loads + output"
    )

"""The public API's Kafka settings from plain values: bad input fails at once, naming the field."""

from __future__ import annotations

import pytest

from compactor import Connection
from compactor.errors import ConfigError


def test_a_config_dict_gives_the_broker_and_passes_the_rest_to_librdkafka() -> None:
    made = Connection.of(kafka_config={"bootstrap.servers": "b:9092", "client.id": "loader-7"})
    settings = made.kafka.librdkafka()
    assert made.kafka.bootstrap_servers == "b:9092"
    assert (settings["bootstrap.servers"], settings["client.id"]) == ("b:9092", "loader-7")
    assert made.kafka.segments_topic == "compactor.segments"


def test_no_broker_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="bootstrap_servers: give the broker list"):
        Connection.of(kafka_config={"client.id": "x"})


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"encoding": "protobuf"}, "encoding"), ({"encoding": "confluent"}, "schema_registry")],
)
def test_a_bad_encoding_is_refused_with_the_field_s_name(changes: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Connection.of("b:9092", **changes)  # type: ignore[arg-type]

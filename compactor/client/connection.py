"""Kafka settings for the public API, from plain values: what a producer or consumer knows.

A producer names the broker (`bootstrap_servers`) or hands its own client
settings (`kafka_config`, librdkafka keys such as `security.protocol`), the
topics if they are not the defaults, and the encoding the job reads. Both are
checked by the same models as the job's config file, so a typo fails here with
the field's name, not at the first send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from pydantic import ValidationError

from compactor.codec.events import Codec
from compactor.config.describe import describe
from compactor.config.kafka import KafkaConfig
from compactor.errors import ConfigError
from compactor.kafka.codecs import codec_for
from compactor.kafka.settings import (
    DEFAULT_DEAD_LETTER_TOPIC,
    DEFAULT_RESULTS_TOPIC,
    DEFAULT_SEGMENTS_TOPIC,
    KafkaSettings,
)

Encoding = Literal["single_object", "confluent"]


class KafkaOptions(TypedDict, total=False):
    """The keyword arguments every public class passes on to `Connection.of`."""

    kafka_config: Mapping[str, Any] | None  # librdkafka keys (security, client id, ...)
    segments_topic: str
    results_topic: str
    dead_letter_topic: str
    encoding: Encoding  # the job's `kafka.encoding`
    schema_registry: Mapping[str, str] | None  # `{"url": ...}` with encoding "confluent"


@dataclass(frozen=True)
class Connection:
    """Where events go and how they are encoded: built once, shared by every load or read."""

    kafka: KafkaSettings
    codec: Codec

    @classmethod
    def of(
        cls,
        bootstrap_servers: str | None = None,
        *,
        kafka_config: Mapping[str, Any] | None = None,
        segments_topic: str = DEFAULT_SEGMENTS_TOPIC,
        results_topic: str = DEFAULT_RESULTS_TOPIC,
        dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC,
        encoding: Encoding = "single_object",
        schema_registry: Mapping[str, str] | None = None,
    ) -> Connection:
        """Kafka settings from plain values. `kafka_config` holds librdkafka keys; its
        `bootstrap.servers` serves when `bootstrap_servers` is not given. `encoding` is the
        job's `kafka.encoding`; `confluent` needs `schema_registry` (`{"url": ...}`)."""
        passed = {str(k): str(v) for k, v in (kafka_config or {}).items()}
        servers = bootstrap_servers or passed.pop("bootstrap.servers", None)
        passed.pop("bootstrap.servers", None)
        if not servers:
            raise ConfigError("bootstrap_servers: give the broker list, or bootstrap.servers in kafka_config")
        try:
            block = KafkaConfig.model_validate(
                {"librdkafka": passed, "encoding": encoding, "schema_registry": dict(schema_registry or {})}
            )
        except ValidationError as exc:
            raise ConfigError(describe(exc, "the Kafka settings")) from None
        kafka = KafkaSettings(servers, segments_topic, results_topic, dead_letter_topic, block)
        return cls(kafka, codec_for(kafka))

"""The `kafka:` block: security, topics and pass-through settings shared by every Kafka client."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from compactor.config.units import Frozen


def _secret(value: Any) -> Any:
    """`env:NAME` reads the secret from the environment, so it never sits in the file."""
    if isinstance(value, str) and value.startswith("env:"):
        name = value[4:]
        if name not in os.environ:
            raise ValueError(f"environment variable {name} is not set")
        return os.environ[name]
    return value


Secret = Annotated[SecretStr, BeforeValidator(_secret)]


def _setting(value: Any) -> Any:
    """A client setting as the text both clients take (YAML may give a number or a boolean)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return _secret(value)


# values may be secrets (an OAUTHBEARER client secret, a key password): kept masked, `env:` read
Setting = Annotated[SecretStr, BeforeValidator(_setting)]
TOPIC_NAME = r"^[A-Za-z0-9._-]{1,249}$"  # Kafka's own rule
# Spark's Kafka source options the job sets itself: what it reads, and from where
OWNED_SOURCE_OPTIONS = frozenset({"subscribe", "subscribePattern", "assign", "kafka.bootstrap.servers"})


class TopicsConfig(Frozen):
    """Topic names (the CLI's --*-topic options win over them) and how new topics are created."""

    segments: str | None = Field(default=None, pattern=TOPIC_NAME)
    """The segments topic (loads, merges, requests, configs); `--segments-topic` or
    `COMPACTOR_SEGMENTS_TOPIC` wins; unset: `compactor.segments`."""
    results: str | None = Field(default=None, pattern=TOPIC_NAME)
    """The `MergeResult` topic; `--results-topic` wins; unset: `compactor.results`."""
    dead_letter: str | None = Field(default=None, pattern=TOPIC_NAME)
    """The dead-letter topic; `--dead-letter-topic` wins; unset: `compactor.dead-letter`."""
    advice: str | None = Field(default=None, pattern=TOPIC_NAME)
    """The `ProducerAdvice` topic; unset: `compactor.advice`."""
    partitions: int | None = Field(default=None, ge=1)
    """Partitions of the topics the compactor creates; unset: the broker's default."""
    replication_factor: int | None = Field(default=None, ge=1)
    """Replication factor of the topics the compactor creates; unset: the broker's default."""


class KafkaConfig(Frozen):
    """Settings for every Kafka client (confluent-kafka and Spark's source): security, topics,
    and pass-through maps for what is not modelled.

    Secrets are `SecretStr`: printing or logging this object shows `**********`.
    """

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """The protocol every client speaks to the brokers."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    """The SASL mechanism; required with the SASL protocols."""
    sasl_username: str | None = None
    """The SASL user; required with the SASL protocols."""
    sasl_password: Secret | None = None
    """The SASL password (`env:NAME` reads it from the environment); required with the SASL
    protocols."""
    ssl_ca_location: str | None = None
    """A PEM file of the CA certificates that signed the brokers' certificates."""
    topics: TopicsConfig = TopicsConfig()
    """Topic names, and how missing topics are created."""
    librdkafka: Mapping[str, Setting] = Field(default_factory=dict)
    """librdkafka settings the block does not model (mTLS keys, OAUTHBEARER, `client.id`): they
    go to every confluent-kafka client, over the keys above; values are masked, `env:NAME` works."""
    spark_source: Mapping[str, Setting] = Field(default_factory=dict)
    """Options of Spark's Kafka source (`kafka.`-prefixed consumer settings,
    `maxOffsetsPerTrigger`); `subscribe`, `subscribePattern`, `assign` and
    `kafka.bootstrap.servers` are refused."""
    encoding: Literal["single_object", "confluent"] = "single_object"
    """How events are written: Avro single-object encoding, or the Confluent wire format with
    schema ids from `schema_registry`. Both are read whatever is written."""
    schema_registry: Mapping[str, Setting] = Field(default_factory=dict)
    """confluent-kafka's Schema Registry client settings (`url`, `basic.auth.user.info`, ...);
    `url` is required with `encoding: confluent`."""

    @field_validator("spark_source")
    @classmethod
    def _not_owned(cls, value: Mapping[str, SecretStr]) -> Mapping[str, SecretStr]:
        owned = sorted(OWNED_SOURCE_OPTIONS & set(value))
        if owned:
            raise ValueError(f"{owned} are set by the compactor (use --bootstrap-servers and the topics)")
        return value

    @model_validator(mode="after")
    def _complete(self) -> KafkaConfig:
        if self.security_protocol.startswith("SASL") and not (
            self.sasl_mechanism and self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"{self.security_protocol} needs sasl_mechanism, sasl_username and sasl_password"
            )
        if self.encoding == "confluent" and "url" not in self.schema_registry:
            raise ValueError(
                "encoding confluent needs schema_registry.url (the registry that issues schema ids)"
            )
        return self

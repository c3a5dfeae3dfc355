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
    results: str | None = Field(default=None, pattern=TOPIC_NAME)
    dead_letter: str | None = Field(default=None, pattern=TOPIC_NAME)
    advice: str | None = Field(default=None, pattern=TOPIC_NAME)  # ProducerAdvice; compactor.advice
    # for topics the compactor creates; unset: the broker's own defaults
    partitions: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)


class KafkaConfig(Frozen):
    """Settings for every Kafka client (confluent-kafka and Spark's source): security, topics,
    and pass-through maps for what is not modelled.

    Secrets are `SecretStr`: printing or logging this object shows `**********`.
    """

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_location: str | None = None
    topics: TopicsConfig = TopicsConfig()
    # librdkafka settings the block does not model (mTLS keys, OAUTHBEARER, client.id, ...);
    # they go to every confluent-kafka client and win over the keys above
    librdkafka: Mapping[str, Setting] = Field(default_factory=dict)
    # options of Spark's Kafka source (`kafka.`-prefixed consumer settings, maxOffsetsPerTrigger, ...)
    spark_source: Mapping[str, Setting] = Field(default_factory=dict)
    # how events are framed: Avro single-object encoding, or the Confluent wire format with ids
    # from `schema_registry` (confluent-kafka's client settings: url, basic.auth.user.info, ...)
    encoding: Literal["single_object", "confluent"] = "single_object"
    schema_registry: Mapping[str, Setting] = Field(default_factory=dict)

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

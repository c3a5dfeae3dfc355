"""Kafka settings, built once and used by every command: broker, topics, security.

The security block of the config (`config.kafka.KafkaConfig`) is mapped here
to the two clients' own keys: librdkafka's (confluent-kafka) and the Java
client's inside Spark's Kafka source.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from compactor.config.kafka import KafkaConfig

# librdkafka's log (retried connection errors and the like); the CLI shows it only with --verbose
LIBRDKAFKA_LOG = logging.getLogger("compactor.librdkafka")

DEFAULT_SEGMENTS_TOPIC = "compactor.segments"
DEFAULT_RESULTS_TOPIC = "compactor.results"
DEFAULT_DEAD_LETTER_TOPIC = "compactor.dead-letter"
DEFAULT_ADVICE_TOPIC = "compactor.advice"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is, the topics, and the config's `kafka:` block (security, topic creation,
    pass-through settings) every client uses.

    The block keeps secrets as `SecretStr`, so printing or logging
    these settings never shows a password; the dicts below hold them in clear
    and are handed straight to the clients, never logged.
    """

    bootstrap_servers: str
    segments_topic: str = DEFAULT_SEGMENTS_TOPIC
    results_topic: str = DEFAULT_RESULTS_TOPIC
    dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC
    config: KafkaConfig | None = None  # the config file's `kafka:` block

    @property
    def topics(self) -> tuple[str, str, str, str]:
        return (self.segments_topic, self.results_topic, self.dead_letter_topic, self.advice_topic)

    @property
    def advice_topic(self) -> str:
        """Where `ProducerAdvice` goes: the config's `kafka.topics.advice`, else the default."""
        named = self.config.topics.advice if self.config else None
        return named or DEFAULT_ADVICE_TOPIC

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        """confluent-kafka's settings: the modelled ones, the config's `librdkafka:` map over them,
        and the calling client's own (a group id, say) last."""
        block = self.config
        secure = librdkafka_security(block) if block else {}
        passed = {k: v.get_secret_value() for k, v in block.librdkafka.items()} if block else {}
        # librdkafka's own log lines go through Python logging, not straight to stderr
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": LIBRDKAFKA_LOG,
            **secure,
            **passed,
            **overrides,
        }

    def spark_options(self) -> dict[str, str]:
        """The same settings for Spark's Kafka source (every `kafka.*` option passes through),
        and the config's `spark_source:` options."""
        # Spark's Kafka reader waits out the broker's long poll (fetch.max.wait.ms, 500 ms by
        # default) on each micro-batch's read although the records are there: 10 ms cut a one-event
        # batch's read from about 580 ms to 115 ms here. It polls only for offsets that exist, so
        # a short wait costs no idle fetches. `spark_source` may set it otherwise.
        options = {"kafka.bootstrap.servers": self.bootstrap_servers, "kafka.fetch.max.wait.ms": "10"}
        if self.config:
            options.update({f"kafka.{k}": v for k, v in java_security(self.config).items()})
            options.update({k: v.get_secret_value() for k, v in self.config.spark_source.items()})
        return options

    @property
    def new_topics(self) -> tuple[int, int]:
        """Partitions and replication factor of topics the compactor creates (-1: the broker's)."""
        topics = self.config.topics if self.config else None
        partitions = topics.partitions if topics and topics.partitions else -1
        return partitions, topics.replication_factor if topics and topics.replication_factor else -1


def librdkafka_security(security: KafkaConfig) -> dict[str, str]:
    """confluent-kafka (librdkafka) settings."""
    config: dict[str, str] = {"security.protocol": security.security_protocol}
    if security.sasl_mechanism and security.sasl_username and security.sasl_password:
        config |= {
            "sasl.mechanisms": security.sasl_mechanism,
            "sasl.username": security.sasl_username,
            "sasl.password": security.sasl_password.get_secret_value(),
        }
    if security.ssl_ca_location:
        config["ssl.ca.location"] = security.ssl_ca_location
    return config


def java_security(security: KafkaConfig) -> dict[str, str]:
    """The same settings for the Java client inside Spark's Kafka source (without `kafka.`)."""
    config: dict[str, str] = {"security.protocol": security.security_protocol}
    if security.sasl_mechanism and security.sasl_username and security.sasl_password:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if security.sasl_mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        user = security.sasl_username.replace('"', '\\"')
        secret = security.sasl_password.get_secret_value().replace('"', '\\"')
        config |= {
            "sasl.mechanism": security.sasl_mechanism,
            "sasl.jaas.config": f'{module} required username="{user}" password="{secret}";',
        }
    if security.ssl_ca_location:
        config |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": security.ssl_ca_location}
    return config

"""Kafka settings, built once and used by every command: broker, topics, security.

The security block of the config (`config.kafka.KafkaSecurity`) is mapped here
to the two clients' own keys: librdkafka's (confluent-kafka) and the Java
client's inside Spark's Kafka source.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from compactor.config.kafka import KafkaSecurity

# librdkafka's log (retried connection errors and the like); the CLI shows it only with --verbose
LIBRDKAFKA_LOG = logging.getLogger("compactor.librdkafka")

DEFAULT_SEGMENTS_TOPIC = "compactor.segments"
DEFAULT_RESULTS_TOPIC = "compactor.results"
DEFAULT_DEAD_LETTER_TOPIC = "compactor.dead-letter"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is, the topics, and the security settings every client uses.

    The security settings keep secrets as `SecretStr`, so printing or logging
    these settings never shows a password; the dicts below hold them in clear
    and are handed straight to the clients, never logged.
    """

    bootstrap_servers: str
    segments_topic: str = DEFAULT_SEGMENTS_TOPIC
    results_topic: str = DEFAULT_RESULTS_TOPIC
    dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC
    security: KafkaSecurity | None = None

    @property
    def topics(self) -> tuple[str, str, str]:
        return (self.segments_topic, self.results_topic, self.dead_letter_topic)

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        secure = librdkafka_security(self.security) if self.security else {}
        # librdkafka's own log lines go through Python logging, not straight to stderr
        return {"bootstrap.servers": self.bootstrap_servers, "logger": LIBRDKAFKA_LOG, **secure, **overrides}

    def spark_options(self) -> dict[str, str]:
        """The same settings for Spark's Kafka source (every `kafka.*` option passes through)."""
        options = {"kafka.bootstrap.servers": self.bootstrap_servers}
        if self.security:
            options.update({f"kafka.{k}": v for k, v in java_security(self.security).items()})
        return options


def librdkafka_security(security: KafkaSecurity) -> dict[str, str]:
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


def java_security(security: KafkaSecurity) -> dict[str, str]:
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

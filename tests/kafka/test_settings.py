"""Kafka security settings reach both clients; secrets never show in logs or output."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Producer

from compactor.config.loading import load_config
from compactor.errors import ConfigError
from compactor.kafka.settings import LIBRDKAFKA_LOG, KafkaSettings

SECRET = "s3cr3t-Pa55"


def secured(monkeypatch: pytest.MonkeyPatch) -> KafkaSettings:
    monkeypatch.setenv("COMPACTOR_TEST_KAFKA_PASSWORD", SECRET)
    config = load_config(
        {
            "kafka": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "compactor",
                "sasl_password": "env:COMPACTOR_TEST_KAFKA_PASSWORD",
                "ssl_ca_location": "/etc/ssl/ca.pem",
            }
        }
    )
    return KafkaSettings("broker:9093", config=config.kafka)


def test_settings_reach_confluent_kafka_and_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = secured(monkeypatch)
    client = kafka.librdkafka()
    assert client | {"bootstrap.servers": "broker:9093"} == {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "compactor",
        "sasl.password": SECRET,
        "ssl.ca.location": "/etc/ssl/ca.pem",
        "logger": LIBRDKAFKA_LOG,  # librdkafka's log through Python logging
    }
    # librdkafka accepts every key (the CA file itself is checked at creation, so leave it out here)
    Producer({k: v for k, v in client.items() if k != "ssl.ca.location"} | {"enable.idempotence": True})
    spark = kafka.spark_options()
    assert spark["kafka.security.protocol"] == "SASL_SSL"
    assert spark["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spark["kafka.sasl.jaas.config"] == (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="compactor" password="{SECRET}";'
    )
    assert (spark["kafka.ssl.truststore.type"], spark["kafka.ssl.truststore.location"]) == (
        "PEM",
        "/etc/ssl/ca.pem",
    )


def test_secrets_are_never_printed_or_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kafka = secured(monkeypatch)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("compactor").info("kafka settings: %s / %r", kafka, kafka.config)
    assert SECRET not in caplog.text and SECRET not in str(kafka) and SECRET not in repr(kafka)
    assert "**********" in caplog.text
    assert SECRET not in kafka.config.model_dump_json()  # type: ignore[union-attr]


def test_incomplete_or_missing_secrets_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ConfigError, match="SASL_PLAINTEXT needs sasl_mechanism, sasl_username and sasl_password"
    ):
        load_config({"kafka": {"security_protocol": "SASL_PLAINTEXT"}})
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    with pytest.raises(ConfigError) as err:
        load_config(
            {
                "kafka": {
                    "security_protocol": "SASL_SSL",
                    "sasl_mechanism": "PLAIN",
                    "sasl_username": "u",
                    "sasl_password": "env:NOPE_NOT_SET",
                }
            }
        )
    assert "environment variable NOPE_NOT_SET is not set" in str(err.value)


def test_pass_through_settings_reach_each_client_masked_and_after_the_modelled_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COMPACTOR_TEST_OAUTH_SECRET", SECRET)
    config = load_config(
        {
            "kafka": {
                "security_protocol": "SSL",
                "librdkafka": {
                    "client.id": "compactor-eu", "security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER",
                    "sasl.oauthbearer.client.secret": "env:COMPACTOR_TEST_OAUTH_SECRET",
                    "socket.keepalive.enable": True, "message.timeout.ms": 30000,
                },
                "spark_source": {"maxOffsetsPerTrigger": 5000, "kafka.client.id": "compactor-eu-spark"},
            }
        }
    )  # fmt: skip
    kafka = KafkaSettings("broker:9093", config=config.kafka)
    client = kafka.librdkafka(**{"group.id": "g"})
    assert {k: client[k] for k in ("client.id", "security.protocol", "socket.keepalive.enable", "group.id")} == {
        "client.id": "compactor-eu", "security.protocol": "SASL_SSL", "socket.keepalive.enable": "true",
        "group.id": "g",
    }  # fmt: skip
    assert (client["sasl.oauthbearer.client.secret"], client["message.timeout.ms"]) == (SECRET, "30000")
    # librdkafka takes every key (the SASL ones would need a token endpoint)
    Producer({k: v for k, v in client.items() if not k.startswith("sasl")} | {"security.protocol": "SSL"})
    spark = kafka.spark_options()
    assert (spark["maxOffsetsPerTrigger"], spark["kafka.client.id"]) == ("5000", "compactor-eu-spark")
    assert spark["kafka.fetch.max.wait.ms"] == "10", "the short fetch wait the micro-batch read needs"
    tuned = load_config({"kafka": {"spark_source": {"kafka.fetch.max.wait.ms": "50"}}}).kafka
    assert KafkaSettings("b:9092", config=tuned).spark_options()["kafka.fetch.max.wait.ms"] == "50"
    assert SECRET not in repr(config.kafka) and SECRET not in config.kafka.model_dump_json()  # type: ignore[union-attr]


def test_options_the_job_owns_and_bad_topic_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"kafka\.spark_source.*\['subscribe'\] are set by the compactor"):
        load_config({"kafka": {"spark_source": {"subscribe": "other"}}})
    with pytest.raises(ConfigError, match=r"kafka\.topics\.segments"):
        load_config({"kafka": {"topics": {"segments": "no spaces allowed"}}})
    with pytest.raises(ConfigError, match=r"kafka\.topics\.replication_factor"):
        load_config({"kafka": {"topics": {"replication_factor": 0}}})
    topics = load_config({"kafka": {"topics": {"partitions": 6}}}).kafka
    assert KafkaSettings("b:1", config=topics).new_topics == (6, -1), "replication: the broker's default"
    assert KafkaSettings("b:1").new_topics == (-1, -1)

"""Topics from the config's `kafka.topics` on a real broker: names under the CLI's, partitions,
and the broker's default replication."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from compactor.cli.main import main
from compactor.config.loading import load_config
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from tests.helpers.streaming import consume_all

pytestmark = pytest.mark.integration


def partitions(bootstrap: str, topic: str) -> int:
    """The topic's partition count, once the broker's metadata lists them (a topic just created
    may show none for a moment)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 10
    while True:
        found = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_new_topics_take_the_configured_partitions_else_the_brokers_defaults(
    kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    configured = load_config({"kafka": {"topics": {"partitions": 3}}}).kafka
    ensure_topics(KafkaSettings(kafka_bootstrap, config=configured), [wide := unique("wide")])
    ensure_topics(KafkaSettings(kafka_bootstrap), [plain := unique("plain")])  # replication -1 accepted
    assert (partitions(kafka_bootstrap, wide), partitions(kafka_bootstrap, plain)) == (3, 1)  # broker: 1


def test_a_topic_named_on_the_command_line_wins_over_the_config_which_wins_over_the_default(
    kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    configured, named = unique("configured"), unique("named")
    ensure_topics(KafkaSettings(kafka_bootstrap), [configured, named])
    config = tmp_path / "c.yaml"
    config.write_text(f"kafka:\n  topics:\n    segments: {configured}\n")
    base = ["table", "disable", "t", "--config", str(config), "--bootstrap-servers", kafka_bootstrap]
    assert CliRunner().invoke(main, base).exit_code == 0
    assert CliRunner().invoke(main, [*base, "--segments-topic", named]).exit_code == 0
    assert CliRunner().invoke(main, base, env={"COMPACTOR_SEGMENTS_TOPIC": named}).exit_code == 0
    assert (len(consume_all(kafka_bootstrap, configured)), len(consume_all(kafka_bootstrap, named))) == (1, 2)

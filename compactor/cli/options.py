"""Options shared by the commands, and the settings built once from them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from compactor.config.rules import RULE_NAMES
from compactor.config.tables import ProjectConfig
from compactor.domain.segments import utc
from compactor.kafka.settings import (
    DEFAULT_DEAD_LETTER_TOPIC,
    DEFAULT_RESULTS_TOPIC,
    DEFAULT_SEGMENTS_TOPIC,
    KafkaSettings,
)

DEFAULT_HOME = Path(".compactor")


def instant(_: click.Context, __: click.Parameter, value: str | None) -> datetime | None:
    """An ISO 8601 time option, UTC when it names no offset."""
    if value is None:
        return None
    try:
        return utc(datetime.fromisoformat(value))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from None


bootstrap_option = click.option(
    "--bootstrap-servers",
    envvar="KAFKA_BOOTSTRAP_SERVERS",
    required=True,
    help="Kafka bootstrap servers (env KAFKA_BOOTSTRAP_SERVERS).",
)
warehouse_option = click.option(
    "--warehouse",
    default=str(DEFAULT_HOME / "warehouse"),
    show_default=True,
    help="Directory or URI (s3a://, abfss://, gs://, file://) holding one Delta table per table.",
)
segments_topic_option = click.option(
    "--segments-topic", default=DEFAULT_SEGMENTS_TOPIC, show_default=True, help="Topic of completion events."
)
rule_choice = click.Choice(RULE_NAMES)


def config_option(required: bool, text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        required=required,
        envvar="COMPACTOR_CONFIG",
        help=text + " (env COMPACTOR_CONFIG).",
    )


def kafka_settings(
    bootstrap_servers: str,
    config: ProjectConfig | None,
    segments_topic: str = DEFAULT_SEGMENTS_TOPIC,
    results_topic: str = DEFAULT_RESULTS_TOPIC,
    dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC,
) -> KafkaSettings:
    """Every command's Kafka settings: the broker and topics, and the config's `kafka:` block."""
    security = config.kafka if config is not None else None
    return KafkaSettings(bootstrap_servers, segments_topic, results_topic, dead_letter_topic, security)


def load_optional_config(path: Path | None) -> ProjectConfig | None:
    from compactor.config.loading import load_config_file

    return load_config_file(path) if path is not None else None

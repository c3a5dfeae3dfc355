"""`compactor config`: publish table configs to the running job."""

from __future__ import annotations

from pathlib import Path

import click

from compactor.cli.options import bootstrap_option, kafka_settings, segments_topic_option


@click.group("config")
def config_group() -> None:
    """Table configs: validate and publish new versions to the running job."""


@config_group.command("validate")
@click.argument("config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True))
def config_validate(config_path: Path) -> None:
    """Check FILE as the job would load it: every key, and each listed table's merged settings."""
    from compactor.config.loading import load_config_file

    project = load_config_file(config_path)
    for table in project.tables:
        project.for_table(table)  # cross-key checks run on the merged settings
    names = ", ".join(project.tables) or "defaults only"
    click.echo(f"{config_path}: valid ({len(project.tables)} table(s): {names})")


@config_group.command("apply")
@click.argument("config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--table", "tables", multiple=True, help="Only these tables (default: every table in the file)."
)
@bootstrap_option
@segments_topic_option
def config_apply(
    config_path: Path, tables: tuple[str, ...], bootstrap_servers: str, segments_topic: str
) -> None:
    """Publish each table's config (a ConfigApplied event); the job adopts newer versions."""
    from compactor.config.loading import load_config_file
    from compactor.config.publishing import config_events
    from compactor.domain.clock import now_utc
    from compactor.kafka.codecs import codec_for
    from compactor.kafka.producer import EventProducer
    from compactor.kafka.topics import require_broker

    project = load_config_file(config_path)
    events = config_events(project, tables or tuple(project.tables), now_utc())
    kafka = kafka_settings(bootstrap_servers, project, segments_topic)
    codec = codec_for(kafka)
    require_broker(kafka)
    producer = EventProducer(kafka)
    try:
        producer.send_all(
            [(kafka.segments_topic, e.table, codec.encode_config_applied(e), None) for e in events]
        )
    finally:
        producer.close()
    for e in events:
        click.echo(f"published {e.table} config version {e.config_version}")

"""`compactor config`: validate, show and publish table configs to the running job."""

from __future__ import annotations

import re
from pathlib import Path

import click

from compactor.cli.options import (
    bootstrap_option,
    kafka_settings,
    segments_topic_option,
    spark_options,
    spark_session,
)
from compactor.config.tables import ProjectConfig
from compactor.errors import ConfigError

MASK = "**********"  # as pydantic shows a secret
# the keys Spark itself redacts by default (`spark.redaction.regex`): an S3 secret key, a password
SPARK_SECRET = re.compile(r"(?i)secret|password|token|access[.]?key")


@click.group("config")
def config_group() -> None:
    """Table configs: validate and publish new versions to the running job."""


@config_group.command("validate")
@click.argument("config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--warehouse",
    help="Also check the warehouse's tables (Spark reads each one's protocol): a table whose Delta "
    "features no merge preserves (liquid clustering, append-only) is refused.",
)
@spark_options
def config_validate(config_path: Path, warehouse: str | None) -> None:
    """Check FILE as the job would load it: every key, and each listed table's merged settings;
    with --warehouse, also that the job can merge each table it would compact."""
    from compactor.config.loading import load_config_file

    project = load_config_file(config_path)
    for table in project.tables:
        project.for_table(table)  # cross-key checks run on the merged settings
    names = ", ".join(project.tables) or "defaults only"
    if warehouse is not None:
        refused = _refused_tables(project, warehouse)
        for table, why in refused:
            click.echo(f"table {table}: not compacted: {why}", err=True)
        if refused:
            raise ConfigError(
                f"{len(refused)} table(s) in {warehouse} have Delta features no merge preserves: leave "
                "them to Delta's OPTIMIZE (merge_enabled: false) or recreate them without those features"
            )
    click.echo(f"{config_path}: valid ({len(project.tables)} table(s): {names})")


@config_group.command("show")
@click.argument("config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--table",
    "tables",
    multiple=True,
    help="Only this table's settings (repeatable); a table the file does not list shows the defaults.",
)
def config_show(config_path: Path, tables: tuple[str, ...]) -> None:
    """Print FILE as the job reads it, as YAML: every default filled in, each listed table's
    settings merged with the defaults, and every secret (passwords, `env:` values, the
    `librdkafka`, `spark_source` and `schema_registry` values) masked as **********."""
    import yaml

    from compactor.config.loading import load_config_file

    project = load_config_file(config_path)
    shown = {
        "kafka": project.kafka.model_dump(mode="json") if project.kafka else None,
        "spark": {k: MASK if SPARK_SECRET.search(k) else v for k, v in project.spark.items()},
        "operations": project.operations.model_dump(mode="json"),
        "tables": {
            table: project.for_table(table).model_dump(mode="json")
            for table in (tables or project.tables or ())
        },
    }
    if tables:
        shown = {"tables": shown["tables"]}
    click.echo(yaml.safe_dump(shown, sort_keys=False), nl=False)


def _refused_tables(project: ProjectConfig, warehouse: str) -> list[tuple[str, str]]:
    """(table, why) for each table of the warehouse the config would compact and no merge can."""
    from compactor.delta.spark_store import SparkTableStore

    spark = spark_session("compactor-config-validate", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    store = SparkTableStore(spark, warehouse)
    found = []
    for table in store.tables():
        if not project.for_table(table).merge_enabled:
            continue
        why = store.refusal(table)
        if why is not None:
            found.append((table, why))
    return found


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

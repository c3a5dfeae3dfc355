"""Options shared by the commands, and the settings built once from them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from compactor.config.rules import RULE_NAMES, Resources
from compactor.config.tables import ProjectConfig
from compactor.domain.segments import utc
from compactor.errors import TableNotFoundError
from compactor.kafka.settings import (
    DEFAULT_DEAD_LETTER_TOPIC,
    DEFAULT_RESULTS_TOPIC,
    DEFAULT_SEGMENTS_TOPIC,
    KafkaSettings,
)

DEFAULT_HOME = Path(".compactor")
OPERATOR_LOG = logging.getLogger("compactor.operator")  # `say` under --log-format json
OPERATOR_LOG.setLevel(logging.INFO)


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
    help="Directory or URI (file://, s3a://, gs://; abfss:// through Hadoop's connector, untested) "
    "holding one Delta table per table.",
)
segments_topic_option = click.option(
    "--segments-topic",
    envvar="COMPACTOR_SEGMENTS_TOPIC",
    default=DEFAULT_SEGMENTS_TOPIC,
    show_default=True,
    help="Topic of completion events (env COMPACTOR_SEGMENTS_TOPIC; else the config's kafka.topics.segments).",
)
jobs_checkpoint_option = click.option(
    "--checkpoint",
    default=str(DEFAULT_HOME / "checkpoint"),
    show_default=True,
    help="The jobs' --checkpoint, to read how far each shard's query has got.",
)
rule_choice = click.Choice(RULE_NAMES)


def console_exposure_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--console-allowed-host` and `--console-behind-tls-proxy`: the names the console answers
    (beside the loopback names and the address it binds) and whether a TLS proxy fronts it."""
    command = click.option(
        "--console-behind-tls-proxy",
        is_flag=True,
        help="A TLS-terminating proxy fronts the console: its session cookie is Secure, and the "
        "proxy's X-Forwarded-For, -Proto and -Host headers are believed (one proxy hop).",
    )(command)
    return click.option(
        "--console-allowed-host",
        "console_allowed_hosts",
        multiple=True,
        metavar="NAME",
        help="A host name the console answers besides localhost and the address it binds (repeatable): "
        "the name browsers or the proxy use. Requests for any other Host get 421 (DNS rebinding).",
    )(command)


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
    """Every command's Kafka settings: the broker and topics, and the config's `kafka:` block.
    A topic named on the command line (or its environment) wins over the config's `kafka.topics`,
    which wins over the default."""
    block = config.kafka if config is not None else None
    named = block.topics if block is not None else None

    def topic(option: str, given: str, configured: str | None) -> str:
        source = click.get_current_context().get_parameter_source(option)
        explicit = source in {ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT}
        return given if explicit or configured is None else configured

    return KafkaSettings(
        bootstrap_servers,
        topic("segments_topic", segments_topic, named.segments if named else None),
        topic("results_topic", results_topic, named.results if named else None),
        topic("dead_letter_topic", dead_letter_topic, named.dead_letter if named else None),
        block,
    )


def load_optional_config(path: Path | None) -> ProjectConfig | None:
    from compactor.config.loading import load_config_file

    return load_config_file(path) if path is not None else None


def say(message: str) -> None:
    """A line for the operator: plain text on stdout, or a log record under --log-format json."""
    if click.get_current_context().meta.get("log_format") == "json":
        OPERATOR_LOG.info("%s", message)
    else:
        click.echo(message)


def chosen_tables(store: Any, tables: tuple[str, ...], warehouse: str) -> tuple[str, ...]:
    """The tables a command names (each must exist), or every table of the warehouse."""
    for table in tables:
        if not store.exists(table):
            raise TableNotFoundError(f"no table {table!r} in {warehouse}")
    return tables or tuple(store.tables())


def _store_master(ctx: click.Context, _: click.Parameter, value: str | None) -> None:
    ctx.meta["spark_master"] = value


def _store_conf(ctx: click.Context, _: click.Parameter, values: tuple[str, ...]) -> None:
    pairs: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--conf")
        pairs[key.strip()] = value
    ctx.meta["spark_conf"] = pairs


def spark_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--master` and repeatable `--conf KEY=VALUE` for a command that starts Spark."""
    command = click.option(
        "--conf",
        "spark_conf",
        multiple=True,
        expose_value=False,
        callback=_store_conf,
        metavar="KEY=VALUE",
        help="A Spark setting (repeatable); beats spark-submit, spark-defaults.conf and the config's spark: block.",
    )(command)
    return click.option(
        "--master",
        "spark_master",
        expose_value=False,
        callback=_store_master,
        help="Spark master URL (default: the one spark-submit or spark-defaults.conf gives, else local[*]).",
    )(command)


def spark_session(
    app_name: str,
    config: ProjectConfig | None,
    locations: tuple[str, ...],
    fair_pools: Mapping[str, Resources] | None = None,
) -> Any:
    """The command's SparkSession: the user's Spark settings, the config's `spark:` block, the CLI's."""
    return spark_builder(app_name, config, locations, fair_pools)()


def spark_builder(
    app_name: str,
    config: ProjectConfig | None,
    locations: tuple[str, ...],
    fair_pools: Mapping[str, Resources] | None = None,
) -> Callable[[], Any]:
    """`spark_session`, to be built later and on any thread: the command line's Spark options are
    read now, from click's context, which only the command's own thread has."""
    from compactor.spark.session import build_spark

    meta = click.get_current_context().meta
    master, overrides = meta.get("spark_master"), meta.get("spark_conf")
    return lambda: build_spark(
        app_name,
        master=master,
        extra_conf=config.spark if config is not None else None,
        fair_pools=fair_pools or {},
        locations=locations,
        overrides=overrides,
    )

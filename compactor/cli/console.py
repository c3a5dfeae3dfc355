"""`compactor console`: the operator's web console over a warehouse, with no job of its own."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from compactor.cli.options import (
    config_option,
    console_exposure_options,
    jobs_checkpoint_option,
    kafka_settings,
    say,
    segments_topic_option,
    spark_options,
    spark_session,
    warehouse_option,
)

if TYPE_CHECKING:
    from compactor.observe.console.snapshot import ShardRow

DEFAULT_PORT = 8090
TOKEN_HELP = (
    "env:NAME: the environment variable holding the token that allows controls (at least 16 "
    "characters); without it the console is read-only."
)


@click.command()
@config_option(required=True, text="Table config (the rules that say what is ready to merge)")
@warehouse_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to serve the console on (0 picks a free one and prints it).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; put the console behind a reverse proxy with its own authentication to open it wider.",
)
@click.option("--console-token", "token_spec", metavar="env:NAME", help=TOKEN_HELP)
@click.option(
    "--bootstrap-servers",
    envvar="KAFKA_BOOTSTRAP_SERVERS",
    help="Kafka, for recent merges, dead letters, shard owners and the controls (env KAFKA_BOOTSTRAP_SERVERS); "
    "without it those pages say so.",
)
@segments_topic_option
@jobs_checkpoint_option
@click.option(
    "--refresh",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds between two readings of the warehouse.",
)
@console_exposure_options
@spark_options
def console(
    config_path: Path,
    warehouse: str,
    port: int,
    host: str,
    token_spec: str | None,
    bootstrap_servers: str | None,
    segments_topic: str,
    checkpoint: str,
    refresh: float,
    console_allowed_hosts: tuple[str, ...],
    console_behind_tls_proxy: bool,
) -> None:
    """Serve the web console: every table's status, its timeline, plans and merges, the shards and
    the dead letters; with a token, controls that publish what `compactor table` and `compactor
    request` publish. Reads what `compactor status` reads, so it works beside the running job."""
    from prometheus_client import CollectorRegistry

    from compactor.config.loading import load_config_file
    from compactor.delta.spark_store import SparkTableStore
    from compactor.kafka.topics import require_broker
    from compactor.observe.console.guard import ConsoleGuard, allowed_hosts
    from compactor.observe.console.serve import console_token, shard_rows, warehouse_console
    from compactor.observe.metrics.server import ProbeServer
    from compactor.observe.status.warehouse_status import shard_section

    token = console_token(token_spec)  # before Spark: a bad token fails in seconds
    project = load_config_file(config_path)
    kafka = kafka_settings(bootstrap_servers, project, segments_topic) if bootstrap_servers else None
    if kafka is not None:
        require_broker(kafka)
    spark = spark_session("compactor-console", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    store = SparkTableStore(spark, warehouse)

    def shards() -> list[ShardRow] | None:
        return shard_rows(shard_section(spark, warehouse, segments_topic, checkpoint, store, kafka), {})

    guard = ConsoleGuard(allowed_hosts(host, console_allowed_hosts), console_behind_tls_proxy)
    served = warehouse_console(spark, warehouse, project, store, kafka, shards, token, refresh, guard)
    server = ProbeServer(CollectorRegistry(), {}, host, port, console=served.app).start()
    mode = "read-only" if token is None else "controls for the token's holder"
    say(f"console: http://{host}:{server.port}/ ({mode}); Ctrl-C stops")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        served.close()

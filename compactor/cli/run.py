"""`compactor run`: the streaming job's options, gathered and handed to `job.run`."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from compactor.cli.options import (
    DEFAULT_HOME,
    bootstrap_option,
    config_option,
    console_exposure_options,
    kafka_settings,
    say,
    segments_topic_option,
    spark_builder,
    spark_options,
    warehouse_option,
)
from compactor.kafka.settings import DEFAULT_DEAD_LETTER_TOPIC, DEFAULT_RESULTS_TOPIC, LIBRDKAFKA_LOG


@click.command()
@config_option(required=True, text="Table config (YAML)")
@warehouse_option
@click.option(
    "--checkpoint",
    default=str(DEFAULT_HOME / "checkpoint"),
    show_default=True,
    help="Spark's checkpoint for the query (offsets): a directory or URI.",
)
@bootstrap_option
@segments_topic_option
@click.option(
    "--results-topic", default=DEFAULT_RESULTS_TOPIC, show_default=True, help="Topic of MergeResults."
)
@click.option(
    "--dead-letter-topic",
    default=DEFAULT_DEAD_LETTER_TOPIC,
    show_default=True,
    help="Topic of refused events.",
)
@click.option("--until-idle", is_flag=True, help="Process what has arrived, cascade, and exit when idle.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics, /healthz and /ready on this port (0: any free one); default: the config's "
    "operations.metrics_port, else none.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port binds; 0.0.0.0 for a scraper on another host (the container image does).",
)
@click.option(
    "--console-port",
    type=click.IntRange(0, 65535),
    help="Serve the web console on this port (with /metrics, /healthz and /ready: the same server when "
    "it is the metrics port or none is set); default: no console.",
)
@click.option(
    "--console-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the console binds; open it wider only behind a reverse proxy with its own authentication.",
)
@click.option(
    "--console-token",
    "console_token_spec",
    metavar="env:NAME",
    help="env:NAME: the environment variable holding the token that allows the console's controls (at least "
    "16 characters); without it the console is read-only.",
)
@click.option(
    "--standby",
    is_flag=True,
    help="If other jobs already run every shard of this warehouse and topic, wait and take over when "
    "one stops (default: the config's operations.standby, else refuse to start).",
)
@click.option(
    "--reshard",
    is_flag=True,
    help="Change the shard count to the config's operations.shards: every job of the warehouse must be "
    "stopped; the catalog journals are folded and the new shards' queries start where the old ones stopped.",
)
@click.option(
    "--instance-id",
    help="This job's name in the lease's consumer group (Kafka static membership), kept across restarts; "
    "default: one derived from the host, the warehouse, the topic and the checkpoint. Two live jobs must not "
    "share one: the later one to join takes it, and the other stops (exit 4).",
)
@console_exposure_options
@spark_options
def run(
    config_path: Path,
    warehouse: str,
    checkpoint: str,
    bootstrap_servers: str,
    segments_topic: str,
    results_topic: str,
    dead_letter_topic: str,
    until_idle: bool,
    metrics_port: int | None,
    metrics_host: str,
    console_port: int | None,
    console_host: str,
    console_token_spec: str | None,
    console_allowed_hosts: tuple[str, ...],
    console_behind_tls_proxy: bool,
    standby: bool,
    reshard: bool,
    instance_id: str | None,
) -> None:
    """Run the streaming compaction job until interrupted (or, with --until-idle, until idle).

    With one shard (operations.shards, the default) one job runs per warehouse and segments
    topic: a second one refuses to start, or with --standby waits and takes over when the first
    stops or dies. With more, every job started shares the shards through Kafka's group protocol."""
    from compactor.config.loading import load_config_file
    from compactor.config.rules import JOB_POOLS
    from compactor.job.run import JobRun, Served, run_job
    from compactor.observe.console.guard import ConsoleGuard, allowed_hosts
    from compactor.observe.console.serve import console_token

    # a job runs for months: its log keeps librdkafka's fatal errors (a fenced producer, a lost
    # authorisation), which the other commands leave to their one line
    LIBRDKAFKA_LOG.setLevel(min(LIBRDKAFKA_LOG.level, logging.CRITICAL))
    token = console_token(console_token_spec)  # before anything starts: a bad token fails in seconds
    config = load_config_file(config_path)
    kafka = kafka_settings(bootstrap_servers, config, segments_topic, results_topic, dead_letter_topic)
    job = JobRun(
        config,
        kafka,
        warehouse,
        checkpoint,
        until_idle=until_idle,
        served=Served(
            (metrics_port, metrics_host),
            (console_port, console_host),
            token,
            ConsoleGuard(allowed_hosts(console_host, console_allowed_hosts), console_behind_tls_proxy),
        ),
        standby=standby,
        reshard=reshard,
        instance_id=instance_id,
    )
    run_job(
        job,
        spark_builder(
            "streaming-compactor", config, (warehouse, checkpoint), config.spark_pools() | JOB_POOLS
        ),
        say,
    )

"""`compactor run`: the streaming job."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

import click

from compactor.cli.options import (
    DEFAULT_HOME,
    bootstrap_option,
    config_option,
    kafka_settings,
    say,
    segments_topic_option,
    spark_options,
    spark_session,
    warehouse_option,
)
from compactor.config.tables import ProjectConfig
from compactor.delta.paths import warehouse_uri
from compactor.errors import CompactorError, LeaseHeld
from compactor.kafka.lease import ControllerLease
from compactor.kafka.settings import DEFAULT_DEAD_LETTER_TOPIC, DEFAULT_RESULTS_TOPIC, KafkaSettings

# on a stop, merges in flight get this long to finish; the rest are planned again at the next start
STOP_GRACE_S = 60.0


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
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address the metrics port binds.")
@click.option(
    "--standby", is_flag=True,
    help="If another job already runs on this warehouse and topic, wait and take over when it stops "
    "(default: the config's operations.standby, else refuse to start).",
)  # fmt: skip
@spark_options
def run(
    config_path: Path, warehouse: str, checkpoint: str, bootstrap_servers: str,
    segments_topic: str, results_topic: str, dead_letter_topic: str, until_idle: bool,
    metrics_port: int | None, metrics_host: str, standby: bool,
) -> None:  # fmt: skip
    """Run the streaming compaction job until interrupted (or, with --until-idle, until idle).

    One job runs per warehouse and segments topic: a second one refuses to start, or with
    --standby waits and takes over when the first stops or dies."""
    from compactor.config.loading import load_config_file

    config = load_config_file(config_path)
    kafka = kafka_settings(bootstrap_servers, config, segments_topic, results_topic, dead_letter_topic)
    # at the default level the operator still sees one line per merge (dead letters warn anyway)
    for name in ("compactor.stream.runner", "compactor.stream.summary"):
        logging.getLogger(name).setLevel(logging.INFO)
    # before Spark: a refused second job exits in seconds
    lease = ControllerLease(kafka, warehouse_uri(warehouse))
    lease.acquire(standby or config.operations.standby, waiting=say)
    try:
        _run(config, lease, kafka, warehouse, checkpoint, until_idle, metrics_port, metrics_host)
    finally:
        lease.close()


def _run(
    config: ProjectConfig, lease: ControllerLease, kafka: KafkaSettings, warehouse: str, checkpoint: str,
    until_idle: bool, metrics_port: int | None, metrics_host: str,
) -> None:  # fmt: skip
    from compactor.kafka.producer import EventProducer
    from compactor.observe.metrics import JobMetrics
    from compactor.observe.readiness import ProgressListener, Readiness
    from compactor.observe.server import ProbeServer
    from compactor.stream.janitor import Janitor
    from compactor.stream.job import build_handler, run_until_idle, start_query
    from compactor.stream.summary import Summary

    spark = spark_session("streaming-compactor", config, (warehouse, checkpoint), config.spark_pools())
    context = spark.sparkContext
    say(f"spark: master {context.master}, UI {context.uiWebUrl or 'off'}")
    producer = EventProducer(kafka)
    metrics = JobMetrics()
    port = metrics_port if metrics_port is not None else config.operations.metrics_port
    readiness, probes = Readiness(kafka), None
    if port is not None:
        probes = ProbeServer(metrics.registry, readiness.checks(), metrics_host, port).start()
        say(f"metrics: http://{metrics_host}:{probes.port}/metrics (and /healthz, /ready)")
    handler = None
    try:
        handler = build_handler(spark, config, warehouse, kafka, producer, metrics=metrics)
        metrics.watch(handler.state)
        # the lag, for planning (admission control), the metrics and the summary
        spark.streams.addListener(ProgressListener(readiness, handler.state.control))
        readiness.catalog = None
        if until_idle:
            runs = run_until_idle(spark, handler, kafka, checkpoint)
            say(
                f"idle after {runs} run(s): {handler.state.stats.events} events, {handler.state.stats.merges} merges"
            )
            return
        Janitor(handler.state).start()  # VACUUM on each table's schedule, in a daemon thread
        Summary(handler.state).start()  # a line a minute
        query = start_query(spark, handler, kafka, checkpoint)
        say(
            f"compactor running: {kafka.segments_topic} -> {warehouse} (checkpoint {checkpoint}); Ctrl-C stops"
        )
        _until_stopped(query, lease)
        left = handler.drain(STOP_GRACE_S)
        if left:
            say(f"{left} merge(s) still running were left; they are planned again at the next start")
        say("compactor stopped")
    finally:
        if handler is not None:
            handler.close(wait=False)  # after a failure or a lost lease: no merge is waited for
        producer.close()
        if probes is not None:
            probes.stop()


def _until_stopped(query: Any, lease: ControllerLease) -> None:
    """Wait for the query; SIGTERM or SIGINT stop it between batches, and the command exits 0.
    A lost lease stops it too (another job may have taken over), with an error.

    The signal only sets a flag: raising inside a py4j call would cut its socket mid-answer.
    """
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    while not stopping.is_set() and not lease.lost.is_set() and query.isActive:
        query.awaitTermination(2)
    if query.isActive:
        query.stop()  # the running batch finishes; Spark records no offsets for an unfinished one
    if lease.lost.is_set():
        raise LeaseHeld(f"lost the controller lease ({lease.group}); stopped so that only one job merges")
    elif query.exception() is not None:
        raise CompactorError(f"the streaming query failed: {query.exception()}")

"""`compactor run`: the streaming job."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
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
from compactor.delta.warehouse.shard_record import ShardRecord
from compactor.errors import ConfigError, ShardCountMismatch
from compactor.kafka.lease import ControllerLease
from compactor.kafka.settings import DEFAULT_DEAD_LETTER_TOPIC, DEFAULT_RESULTS_TOPIC, KafkaSettings
from compactor.kafka.shards import ShardLayout
from compactor.stream.shard_jobs import ShardedJob

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
    standby: bool,
    reshard: bool,
    instance_id: str | None,
) -> None:
    """Run the streaming compaction job until interrupted (or, with --until-idle, until idle).

    With one shard (operations.shards, the default) one job runs per warehouse and segments
    topic: a second one refuses to start, or with --standby waits and takes over when the first
    stops or dies. With more, every job started shares the shards through Kafka's group protocol."""
    from compactor.config.loading import load_config_file
    from compactor.observe.console.serve import console_token

    token = console_token(console_token_spec)  # before anything starts: a bad token fails in seconds
    config = load_config_file(config_path)
    kafka = kafka_settings(bootstrap_servers, config, segments_topic, results_topic, dead_letter_topic)
    # at the default level the operator still sees one line per merge (dead letters warn anyway)
    for name in ("compactor.stream.runner", "compactor.stream.summary"):
        logging.getLogger(name).setLevel(logging.INFO)
    # before Spark: a refused job exits in seconds
    shards = config.operations.shards
    _refuse_other_counts(kafka, warehouse_uri(warehouse), shards)
    # a long-running job is a static member, so that its restart after a crash takes its shards
    # back at once; a one-off run leaves the group when it ends, as a newcomer would
    identity = None if until_idle else warehouse_uri(checkpoint)
    lease = ControllerLease(
        kafka, warehouse_uri(warehouse), shards, checkpoint=identity, instance_id=instance_id
    )
    lease.acquire(standby or config.operations.standby, waiting=say)
    try:
        served = _Served((metrics_port, metrics_host), (console_port, console_host), token)
        _run(config, lease, kafka, warehouse, checkpoint, until_idle, served, reshard)
    finally:
        lease.close()


def _refuse_other_counts(kafka: KafkaSettings, warehouse: str, shards: int) -> None:
    """Jobs with another shard count run on this warehouse and topic: this one must not."""
    from compactor.kafka.lease import running_counts

    for count, members in sorted(running_counts(kafka, warehouse).items()):
        if count != shards:
            raise ShardCountMismatch(
                f"operations.shards is {shards}, but {', '.join(members)} run(s) this warehouse and topic "
                f"with {count} shard(s); use the same count, or stop them and start one job with --reshard"
            )


def _run(
    config: ProjectConfig,
    lease: ControllerLease,
    kafka: KafkaSettings,
    warehouse: str,
    checkpoint: str,
    until_idle: bool,
    served: _Served,
    reshard: bool,
) -> None:
    from compactor.delta.files import HadoopFiles
    from compactor.kafka.producer import EventProducer
    from compactor.observe.readiness import ProgressListener, Readiness
    from compactor.observe.shard_metrics import ShardMetrics
    from compactor.stream.lease_log import LeaseLog

    spark = spark_session("streaming-compactor", config, (warehouse, checkpoint), config.spark_pools())
    context = spark.sparkContext
    say(f"spark: master {context.master}, UI {context.uiWebUrl or 'off'}")
    layout, record = _layout(spark, config, kafka, warehouse, checkpoint, reshard)
    producer = EventProducer(kafka)
    metrics = ShardMetrics()
    metrics.watch_lease(lease)
    LeaseLog(HadoopFiles(spark), warehouse, lease)
    readiness = Readiness(kafka)
    controls: dict[str, Any] = {}  # query name -> its shard's control state, for the lag
    running: dict[int, Any] = {}  # shard index -> the SparkShard this job runs for it
    spark.streams.addListener(ProgressListener(readiness, controls))
    start = _shard_starter(
        spark, config, warehouse, kafka, checkpoint, producer, layout, record, metrics, controls, running
    )
    console = served.console(spark, config, kafka, warehouse, checkpoint, running)
    probes = served.start(config, metrics.registry, readiness.checks(), console)
    try:
        readiness.catalog = None
        if until_idle:
            for index in sorted(lease.owned):
                shard = start(index, False)
                runs, stats = shard.run_until_idle(), shard.handler.stats
                shard.handler.close(wait=False)
                say(f"idle after {runs} run(s): {stats.events} events, {stats.merges} merges")
            return
        where = (
            f"{layout.shards} shard(s), holding {sorted(lease.owned)}" if layout.shards > 1 else "one shard"
        )
        say(
            f"compactor running: {kafka.segments_topic} -> {warehouse} (checkpoint {checkpoint}, {where}); Ctrl-C stops"
        )
        ShardedJob(lease, start, STOP_GRACE_S, say).run(_stop_signal())
        say("compactor stopped")
    finally:
        producer.close()
        for server in probes:
            server.stop()
        if console is not None:
            console.close()


def _layout(
    spark: Any, config: ProjectConfig, kafka: KafkaSettings, warehouse: str, checkpoint: str, reshard: bool
) -> tuple[ShardLayout, ShardRecord | None]:
    """The shards over the segments topic's partitions, checked against the warehouse's record."""
    from compactor.delta.files import HadoopFiles
    from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
    from compactor.domain.clock import now_utc
    from compactor.kafka.topics import ensure_topics, partition_count
    from compactor.stream.resharding import settle_layout

    ensure_topics(kafka, kafka.topics)
    try:
        layout = ShardLayout(
            kafka.segments_topic, config.operations.shards, partition_count(kafka, kafka.segments_topic)
        )
    except ValueError as exc:
        raise ConfigError(f"operations.{exc}") from None
    files = HadoopFiles(spark)
    record = settle_layout(
        files, DeltaCatalogStore(spark, warehouse), warehouse, checkpoint, layout, reshard, now_utc()
    )
    return layout, record


def _shard_starter(
    spark: Any,
    config: ProjectConfig,
    warehouse: str,
    kafka: KafkaSettings,
    checkpoint: str,
    producer: Any,
    layout: ShardLayout,
    record: ShardRecord | None,
    metrics: Any,
    controls: dict[str, Any],
    running: dict[int, Any],
) -> Callable[..., Any]:
    """What starts shard i in this job: its handler on the job's slots and workers, its metrics
    labelled with it, its query (unless only built, for --until-idle)."""
    from compactor.stream.assemble import job_slots
    from compactor.stream.merging.workers import thread_workers
    from compactor.stream.spark_shard import SparkShard, shard_of_job

    slots = job_slots(config)
    workers = thread_workers(slots.limit)

    def start(index: int, query: bool = True) -> SparkShard:
        shard = shard_of_job(layout, record, index, checkpoint, slots, workers)
        shard_metrics = metrics.add(index)

        def stopped() -> None:
            metrics.remove(index)
            controls.pop(shard.query_name, None)
            running.pop(index, None)

        built = SparkShard(
            spark, config, warehouse, kafka, producer, shard, shard_metrics, shard_metrics.watch, stopped
        )
        controls[shard.query_name] = built.handler.control
        running[index] = built
        return built.start() if query else built

    return start


@dataclass(frozen=True)
class _Served:
    """What the job serves over HTTP: metrics and probes, and the console."""

    metrics_at: tuple[int | None, str]
    console_at: tuple[int | None, str]
    token: str | None

    def console(
        self,
        spark: Any,
        config: ProjectConfig,
        kafka: KafkaSettings,
        warehouse: str,
        checkpoint: str,
        running: dict[int, Any],
    ) -> Any:
        """The console over this job's running shards (None: not asked for)."""
        if self.console_at[0] is None:
            return None
        from compactor.delta.spark_store import SparkTableStore
        from compactor.observe.console.serve import job_console, shard_rows
        from compactor.observe.warehouse_status import shard_section

        store = SparkTableStore(spark, warehouse)

        def shards() -> Any:
            queries = {i: s.query_name for i, s in list(running.items())}
            section = shard_section(spark, warehouse, kafka.segments_topic, checkpoint, store, kafka)
            return shard_rows(section, queries)

        return job_console(
            config, kafka, lambda: [s.handler for s in list(running.values())], shards, self.token
        )

    def start(self, config: ProjectConfig, registry: Any, checks: Any, console: Any) -> list[Any]:
        """The servers: one for metrics and the console when they share a port (or the metrics
        have none), else one each (the console's answers /metrics too)."""
        from compactor.observe.server import ProbeServer

        port, host = self.metrics_at
        port = port if port is not None else config.operations.metrics_port
        servers = []
        shared = console is not None and (port is None or port == self.console_at[0])
        if port is not None and not shared:
            servers.append(ProbeServer(registry, checks, host, port).start())
            say(f"metrics: http://{host}:{servers[-1].port}/metrics (and /healthz, /ready)")
        if console is not None:
            at_port, at_host = self.console_at
            servers.append(ProbeServer(registry, checks, at_host, at_port or 0, console=console.app).start())
            mode = "read-only" if self.token is None else "controls for the token's holder"
            say(f"console: http://{at_host}:{servers[-1].port}/ ({mode}; /metrics, /healthz and /ready too)")
        return servers


def _stop_signal() -> threading.Event:
    """Set by SIGTERM or SIGINT: the job stops between batches and exits 0.

    The signal only sets a flag: raising inside a py4j call would cut its socket mid-answer."""
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    return stopping

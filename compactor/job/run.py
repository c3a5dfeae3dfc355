"""`compactor run` from its settings to its stop: the lease taken while Spark starts, the shards'
layout settled, metrics, probes and the console served, and the shards run as the lease gives and
takes them (or, `until_idle`, each drained once). The command line (`cli/run.py`) only gathers the
settings; lines for the operator go through the `say` it passes."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from compactor.config.tables import ProjectConfig
from compactor.delta.files import jvm_class
from compactor.delta.paths import warehouse_uri
from compactor.delta.warehouse.shard_record import ShardRecord
from compactor.errors import ConfigError, ShardCountMismatch
from compactor.job.shard_jobs import ShardedJob
from compactor.kafka.lease import ControllerLease
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.shards import ShardLayout
from compactor.observe.console.guard import ConsoleGuard

# on a stop, merges in flight get this long to finish; the rest are planned again at the next start
STOP_GRACE_S = 60.0
# loggers the operator sees at the default level: one line per merge, one summary a minute
OPERATOR_LOGGERS = ("compactor.stream.runner", "compactor.job.summary")

Say = Callable[[str], None]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobRun:
    """What `compactor run` was asked for."""

    config: ProjectConfig
    kafka: KafkaSettings
    warehouse: str
    checkpoint: str
    until_idle: bool
    served: Served
    standby: bool
    reshard: bool
    instance_id: str | None


def run_job(job: JobRun, spark_session: Callable[[], Any], say: Say) -> None:
    """Run the job until a stop signal (or, `until_idle`, until each shard is idle).

    With one shard (operations.shards, the default) one job runs per warehouse and segments topic:
    a second one refuses to start, or with `standby` waits and takes over when the first stops or
    dies. With more, every job started shares the shards through Kafka's group protocol."""
    for name in OPERATOR_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    # Spark starts beside the lease: its JVM's start-up, most of a restart's seconds, overlaps
    # the group join. Nothing touches the warehouse until the lease is held, and a refused job
    # exits without waiting for Spark.
    spark = SparkStart(
        spark_session,
        then=partial(warm_up, kafka=job.kafka, spark_reads=not job.config.operations.driver_batch_reads),
    )
    shards = job.config.operations.shards
    warehouse = warehouse_uri(job.warehouse)
    _refuse_other_counts(job.kafka, warehouse, shards)
    # a long-running job is a static member, so that its restart after a crash takes its shards
    # back at once; a one-off run leaves the group when it ends, as a newcomer would
    identity = None if job.until_idle else warehouse_uri(job.checkpoint)
    lease = ControllerLease(job.kafka, warehouse, shards, checkpoint=identity, instance_id=job.instance_id)
    lease.acquire(job.standby or job.config.operations.standby, waiting=say)
    try:
        _run(job, lease, spark.session, say)
    finally:
        lease.close()


def warm_up(spark: Any, kafka: KafkaSettings, spark_reads: bool) -> None:
    """What a fresh JVM's first micro-batch pays once, paid while the job recovers: the batch asks
    Spark's Kafka source for the topic's latest offsets (Kafka's admin client and Spark's offset
    reader loaded and compiled: about 0.8 s), so a batch read of the segments topic is planned,
    which fetches its offsets and reads no record. The driver reads the batch's events itself;
    where Spark reads them (`spark_reads`), one tiny job goes through Spark's whole path too
    (planning, code generation, a task, its result back: about a second in a fresh JVM)."""
    try:
        planned_partitions(spark, kafka)
        if spark_reads:
            spark.range(4).selectExpr("cast(id * 2 as string) as text").collect()
    except Exception as exc:  # only a head start: the batches run the same path anyway
        log.debug("warming Spark up failed: %s", exc)


def planned_partitions(spark: Any, kafka: KafkaSettings) -> int:
    """Plan (not run) a batch read of the whole segments topic with the query's source options;
    the number of Spark partitions it would read."""
    reader = spark.read.format("kafka")
    whole = {"subscribe": kafka.segments_topic, "startingOffsets": "earliest", "endingOffsets": "latest"}
    for key, value in (kafka.spark_options() | whole).items():
        reader = reader.option(key, value)
    return int(reader.load()._jdf.javaRDD().getNumPartitions())


class SparkStart:
    """A SparkSession built on a thread of its own from the moment it is made; `session()` waits
    for it and raises what building it raised. Once built, the thread goes on to `then` (the
    warm-up) without holding anyone up. The thread is a daemon: a job refused its lease exits at
    once, and the JVM, whose stdin closes with this process, ends with it."""

    def __init__(self, build: Callable[[], Any], then: Callable[[Any], None]) -> None:
        self._build, self._then = build, then
        self._built = threading.Event()
        self._session: Any = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="spark-start", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._session = self._build()
        except BaseException as exc:  # raised again in the thread that asks for the session
            self._error = exc
        finally:
            self._built.set()
        if self._error is None:
            self._then(self._session)

    def session(self) -> Any:
        self._built.wait()
        if self._error is not None:
            raise self._error
        return self._session


def _refuse_other_counts(kafka: KafkaSettings, warehouse: str, shards: int) -> None:
    """Jobs with another shard count run on this warehouse and topic: this one must not."""
    from compactor.kafka.lease import running_counts

    for count, members in sorted(running_counts(kafka, warehouse).items()):
        if count != shards:
            raise ShardCountMismatch(
                f"operations.shards is {shards}, but {', '.join(members)} run(s) this warehouse and topic "
                f"with {count} shard(s); use the same count, or stop them and start one job with --reshard"
            )


def _run(job: JobRun, lease: ControllerLease, spark_session: Callable[[], Any], say: Say) -> None:
    config, kafka, warehouse, checkpoint = job.config, job.kafka, job.warehouse, job.checkpoint
    from compactor.delta.files import HadoopFiles
    from compactor.job.lease_log import LeaseLog
    from compactor.kafka.producer import EventProducer
    from compactor.observe.metrics.readiness import ProgressListener, Readiness
    from compactor.observe.metrics.shard_metrics import ShardMetrics

    spark = spark_session()
    # the JVM keeps the active session per thread, and Spark was built on another: this one
    # gets it as if it had built it (Delta reads its settings from the active session)
    jvm_class(spark._jvm, "org.apache.spark.sql.SparkSession").setActiveSession(spark._jsparkSession)
    context = spark.sparkContext
    say(f"spark: master {context.master}, UI {context.uiWebUrl or 'off'}")
    layout, record = _layout(spark, config, kafka, warehouse, checkpoint, job.reshard)
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
    console = job.served.console(spark, config, kafka, warehouse, checkpoint, running)
    probes = job.served.start(config, metrics.registry, readiness.checks(), console, say)
    try:
        readiness.catalog = None
        if job.until_idle:
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
    from compactor.job.resharding import settle_layout
    from compactor.kafka.topics import ensure_topics, partition_count

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
    from compactor.domain.clock import now_utc
    from compactor.job.spark_shard import SparkShard, shard_of_job
    from compactor.job.wiring import job_slots
    from compactor.stream.merging.workers import thread_workers
    from compactor.stream.outages import Outages

    slots = job_slots(config)
    workers = thread_workers(slots.limit)
    outages: dict[int, Outages] = {}  # each shard's, kept across its restarts in this process

    def start(index: int, query: bool = True) -> SparkShard:
        if index not in outages:
            outages[index] = Outages(now_utc, config.operations.cool_down)
        shard = shard_of_job(layout, record, index, checkpoint, slots, workers, outages[index])
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
class Served:
    """What the job serves over HTTP: metrics and probes, and the console."""

    metrics_at: tuple[int | None, str]
    console_at: tuple[int | None, str]
    token: str | None
    guard: ConsoleGuard = field(default_factory=ConsoleGuard)  # the names the console answers

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
        from compactor.observe.status.warehouse_status import shard_section

        store = SparkTableStore(spark, warehouse)

        def shards() -> Any:
            queries = {i: s.query_name for i, s in list(running.items())}
            section = shard_section(spark, warehouse, kafka.segments_topic, checkpoint, store, kafka)
            return shard_rows(section, queries)

        return job_console(
            config, kafka, lambda: [s.handler for s in list(running.values())], shards, self.token, self.guard
        )

    def start(self, config: ProjectConfig, registry: Any, checks: Any, console: Any, say: Say) -> list[Any]:
        """The servers: one for metrics and the console when they share a port (or the metrics
        have none), else one each (the console's answers /metrics too)."""
        from compactor.observe.metrics.server import ProbeServer

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

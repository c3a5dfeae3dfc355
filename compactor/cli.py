"""The `compactor` command: thin commands over the library."""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

import click

from compactor.domain import Segment, utc

DEFAULT_HOME = Path(".compactor")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _instant(_: click.Context, __: click.Parameter, value: str | None) -> datetime | None:
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
    type=click.Path(path_type=Path, file_okay=False),
    default=DEFAULT_HOME / "warehouse",
    show_default=True,
    help="Directory holding one Delta table per logical table.",
)
segments_topic_option = click.option("--segments-topic", default="compactor.segments", show_default=True)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(verbose: bool) -> None:
    """Event-driven compactor for Delta Lake segments."""
    _setup_logging(verbose)


@main.command()
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True
)
@warehouse_option
@click.option(
    "--checkpoint", type=click.Path(path_type=Path), default=DEFAULT_HOME / "checkpoint", show_default=True
)
@bootstrap_option
@segments_topic_option
@click.option("--results-topic", default="compactor.results", show_default=True)
@click.option("--dead-letter-topic", default="compactor.dead-letter", show_default=True)
@click.option("--until-idle", is_flag=True, help="Process what has arrived, cascade, and exit when idle.")
def run(
    config_path: Path, warehouse: Path, checkpoint: Path, bootstrap_servers: str,
    segments_topic: str, results_topic: str, dead_letter_topic: str, until_idle: bool,
) -> None:  # fmt: skip
    """Run the streaming compaction job until interrupted (or, with --until-idle, until idle)."""
    from compactor.config import load_config_file
    from compactor.kafka_io import KafkaSettings
    from compactor.spark_session import build_spark
    from streaming_jobs.compact_segments import build_handler, run_until_idle, start_query

    config = load_config_file(config_path)
    kafka = KafkaSettings(bootstrap_servers, segments_topic, results_topic, dead_letter_topic, config.kafka)
    spark = build_spark(fair_pools=config.pool_names(), scratch_dir=checkpoint.parent)
    handler = build_handler(spark, config, warehouse, kafka, checkpoint)
    if until_idle:
        runs = run_until_idle(spark, handler, kafka, checkpoint)
        click.echo(f"idle after {runs} run(s): {handler.stats.events} events, {handler.stats.merges} merges")
        return
    query = start_query(spark, handler, kafka, checkpoint)
    click.echo(f"compactor running: {segments_topic} -> {warehouse} (checkpoint {checkpoint}); Ctrl-C stops")
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


@main.command()
@click.option("--table", required=True)
@click.option(
    "--start", callback=_instant, required=True, help="Inclusive start (ISO 8601, UTC if no offset)."
)
@click.option("--end", callback=_instant, help="Exclusive end; default start + 1 day.")
@click.option(
    "--rows", type=click.IntRange(min=1), default=100, show_default=True, help="Sample rows to generate."
)
@click.option(
    "--parquet", type=click.Path(path_type=Path, exists=True), help="Load these Parquet files instead."
)
@click.option("--segment-id", help="Default: <table>-<start>-<random>.")
@click.option("--sub-partition", "value", help="Build this sub-partition value (needs --config).")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@warehouse_option
@bootstrap_option
@segments_topic_option
def load(
    table: str, start: datetime, end: datetime | None, rows: int, parquet: Path | None,
    segment_id: str | None, value: str | None, config_path: Path | None, warehouse: Path,
    bootstrap_servers: str, segments_topic: str,
) -> None:  # fmt: skip
    """Write one segment (or one sub-partition of it) and publish its SegmentCompleted event."""
    from pyspark.sql import functions as F

    from compactor.config import load_config_file
    from compactor.kafka_io import EventProducer, KafkaSettings, ensure_topics
    from compactor.loader import load_segment, load_sub_partition, sample_rows
    from compactor.spark_session import build_spark

    if value is not None and config_path is None:
        raise click.UsageError("--sub-partition needs --config (the table's declared sub-partition column)")
    kafka = KafkaSettings(bootstrap_servers, segments_topic=segments_topic)
    ensure_topics(kafka, [segments_topic])
    spark = build_spark("compactor-load")
    finish = end or start + timedelta(days=1)
    data = spark.read.parquet(str(parquet)) if parquet else sample_rows(spark, start, finish, rows)
    producer = EventProducer(kafka)
    if value is not None and config_path is not None:
        settings = load_config_file(config_path).for_table(table)
        sub = settings.sub_partition
        if sub is not None and not parquet:  # sample rows get the value as their column
            data = data.withColumn(sub.column, F.expr(sub.sql_literal(value)))
        segment = load_sub_partition(
            spark, warehouse, kafka, producer, settings, table, data, start, finish, value, segment_id
        )
    else:
        segment = load_segment(spark, warehouse, kafka, producer, table, data, start, finish, segment_id)
    click.echo(f"loaded {segment.id} {segment.range}: {segment.records} rows, {segment.bytes} bytes")


@main.command()
@click.option("--table", required=True)
@click.option(
    "--rule", type=click.Choice(["auto_merge", "minor", "major", "bin_pack"]), help="Run this rule once now."
)
@click.option("--merge", "merge_ids", help="Merge exactly these comma-separated segment ids.")
@bootstrap_option
@segments_topic_option
def request(
    table: str, rule: str | None, merge_ids: str | None, bootstrap_servers: str, segments_topic: str
) -> None:
    """Ask the running job to run a rule now (e.g. a manual major) or merge named segments."""
    import uuid

    from compactor.codec import default_codec, now_utc
    from compactor.events import CompactionRequested
    from compactor.kafka_io import EventProducer, KafkaSettings

    ids = tuple(i.strip() for i in (merge_ids or "").split(",") if i.strip())
    if (rule is None) == (not ids):
        raise click.UsageError("give exactly one of --rule or --merge")
    event = CompactionRequested(uuid.uuid4().hex, table, now_utc(), rule, ids)
    kafka = KafkaSettings(bootstrap_servers, segments_topic=segments_topic)
    EventProducer(kafka).send_all(
        [(segments_topic, table, default_codec().encode_compaction_requested(event), None)]
    )
    click.echo(f"requested {rule or 'merge of ' + ','.join(ids)} on {table} (request {event.request_id})")


@main.group()
def kafka() -> None:
    """A local single-node Kafka broker (KRaft) from Apache Kafka's jars."""


@kafka.command("start")
@click.option(
    "--dir", "data_dir", type=click.Path(path_type=Path), default=DEFAULT_HOME / "kafka", show_default=True
)
@click.option("--port", type=click.IntRange(1, 65535), help="Default: a free port.")
def kafka_start(data_dir: Path, port: int | None) -> None:
    """Start the broker in the background and print its bootstrap address."""
    from compactor.kafka_broker import LocalKafkaBroker, running_bootstrap

    existing = running_bootstrap(data_dir)
    if existing:
        click.echo(existing)
        return
    click.echo(LocalKafkaBroker(data_dir, port).start())


@kafka.command("stop")
@click.option(
    "--dir", "data_dir", type=click.Path(path_type=Path), default=DEFAULT_HOME / "kafka", show_default=True
)
def kafka_stop(data_dir: Path) -> None:
    """Stop the broker started from this directory."""
    from compactor.kafka_broker import stop_from_dir

    click.echo("stopped" if stop_from_dir(data_dir) else "no broker running")


@main.command()
def jars() -> None:
    """Resolve and cache the JVM jars (Delta, Kafka connector, Kafka broker)."""
    from compactor import jvm

    for path in [*jvm.spark_jars(), *jvm.kafka_broker_jars()]:
        click.echo(path)


@main.command()
@click.option("--workdir", type=click.Path(path_type=Path), default=DEFAULT_HOME / "demo", show_default=True)
@click.option(
    "--days", type=click.IntRange(7, 366), default=31, show_default=True, help="Daily segments to load."
)
@click.option("--rows", type=click.IntRange(min=1), default=200, show_default=True, help="Rows per segment.")
def demo(workdir: Path, days: int, rows: int) -> None:
    """Load daily segments into a sample table and watch the compactor merge them."""
    from compactor.demo import run_demo

    sys.exit(run_demo(workdir, days, rows, os.environ.get("KAFKA_BOOTSTRAP_SERVERS"), click.echo))


@main.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), required=True)
@click.option("--segments", "segments_path", type=click.Path(path_type=Path, dir_okay=False), required=True)
@click.option("--now", callback=_instant, help="Evaluation time (default: from the file, never the clock).")
@click.option(
    "--simulate", is_flag=True, help="Feed segments one at a time, cascading merges as the stream does."
)
@click.option(
    "--rule", type=click.Choice(["auto_merge", "minor", "major", "bin_pack"]), help="Evaluate this rule once."
)
@click.option("--merge", "merge_ids", help="Validate and apply a manual merge of these comma-separated ids.")
@click.option("--explain", is_flag=True, help="Add each segment's decisions and reasons.")
def plan(
    config_path: Path, segments_path: Path, now: datetime | None, simulate: bool,
    rule: str | None, merge_ids: str | None, explain: bool,
) -> None:  # fmt: skip
    """Dry run: what would the rules merge? Prints JSON; exit 2 on invalid input."""
    import json

    from compactor.config import load_config_file
    from compactor.errors import CompactorError
    from compactor.plan_command import read_segments, run_plan

    try:
        config = load_config_file(config_path)
        segments = read_segments(segments_path)
        ids = [i.strip() for i in merge_ids.split(",") if i.strip()] if merge_ids else []
        result = run_plan(config, segments, now, simulate, rule, ids, explain)
    except (CompactorError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(json.dumps(result, indent=2))


@main.command()
@click.option("--table", required=True)
@click.option("--from", "start", callback=_instant, help="Inclusive start (default: the first segment's).")
@click.option("--to", "end", callback=_instant, help="Exclusive end (default: the last segment's).")
@click.option(
    "--sub-partition", "values", multiple=True, help="Asked value (repeatable; default: all declared)."
)
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True), required=True
)
@warehouse_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def coverage(
    table: str, start: datetime | None, end: datetime | None, values: tuple[str, ...],
    config_path: Path, warehouse: Path, as_json: bool,
) -> None:  # fmt: skip
    """Which segments and sub-partitions can answer a time range and values."""
    import json

    from compactor.config import load_config_file
    from compactor.coverage import coverage as answer
    from compactor.coverage import render
    from compactor.errors import CompactorError

    try:
        settings = load_config_file(config_path).for_table(table)
        result = answer(
            _table_segments(table, warehouse),
            settings.sub_partition.values if settings.sub_partition else (),
            start,
            end,
            values,
        )
    except CompactorError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else render(result))


def _table_segments(table: str, warehouse: Path) -> list[Segment]:
    from compactor.delta_executor import read_catalog
    from compactor.spark_session import build_spark

    spark = build_spark("compactor-coverage")
    spark.sparkContext.setLogLevel("ERROR")
    return read_catalog(spark, warehouse, table).segments(table)


@main.group("config")
def config_group() -> None:
    """Table configs: validate and publish new versions to the running job."""


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
    from compactor.codec import default_codec, now_utc
    from compactor.config import load_config_file
    from compactor.errors import CompactorError
    from compactor.kafka_io import EventProducer, KafkaSettings
    from compactor.publishing import config_events

    try:
        project = load_config_file(config_path)
    except CompactorError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    events = config_events(project, tables or tuple(project.tables), now_utc())
    kafka = KafkaSettings(bootstrap_servers, segments_topic=segments_topic)
    codec = default_codec()
    EventProducer(kafka).send_all(
        [(segments_topic, e.table, codec.encode_config_applied(e), None) for e in events]
    )
    for e in events:
        click.echo(f"published {e.table} config version {e.config_version}")

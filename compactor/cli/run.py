"""`compactor run`: the streaming job."""

from __future__ import annotations

from pathlib import Path

import click

from compactor.cli.options import (
    DEFAULT_HOME,
    bootstrap_option,
    config_option,
    kafka_settings,
    segments_topic_option,
    spark_options,
    spark_session,
    warehouse_option,
)
from compactor.kafka.settings import DEFAULT_DEAD_LETTER_TOPIC, DEFAULT_RESULTS_TOPIC


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
@spark_options
def run(
    config_path: Path, warehouse: str, checkpoint: str, bootstrap_servers: str,
    segments_topic: str, results_topic: str, dead_letter_topic: str, until_idle: bool,
) -> None:  # fmt: skip
    """Run the streaming compaction job until interrupted (or, with --until-idle, until idle)."""
    from compactor.config.loading import load_config_file
    from compactor.kafka.producer import EventProducer
    from compactor.stream.job import build_handler, run_until_idle, start_query

    config = load_config_file(config_path)
    kafka = kafka_settings(bootstrap_servers, config, segments_topic, results_topic, dead_letter_topic)
    spark = spark_session("streaming-compactor", config, (warehouse, checkpoint), config.pool_names())
    context = spark.sparkContext
    click.echo(f"spark: master {context.master}, UI {context.uiWebUrl or 'off'}")
    producer = EventProducer(kafka)
    try:
        handler = build_handler(spark, config, warehouse, kafka, producer)
        if until_idle:
            runs = run_until_idle(spark, handler, kafka, checkpoint)
            click.echo(
                f"idle after {runs} run(s): {handler.state.stats.events} events, {handler.state.stats.merges} merges"
            )
            return
        query = start_query(spark, handler, kafka, checkpoint)
        click.echo(
            f"compactor running: {segments_topic} -> {warehouse} (checkpoint {checkpoint}); Ctrl-C stops"
        )
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
    finally:
        producer.close()

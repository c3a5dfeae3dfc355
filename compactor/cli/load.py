"""`compactor load`: write one sample or Parquet segment and announce it."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import click

from compactor.cli.options import (
    bootstrap_option,
    config_option,
    instant,
    kafka_settings,
    load_optional_config,
    segments_topic_option,
    spark_options,
    spark_session,
    warehouse_option,
)


@click.command()
@click.option("--table", required=True, help="The table to load into.")
@click.option(
    "--start", callback=instant, required=True, help="Inclusive start (ISO 8601, UTC if no offset)."
)
@click.option("--end", callback=instant, help="Exclusive end; default start + 1 day.")
@click.option(
    "--rows", type=click.IntRange(min=1), default=100, show_default=True, help="Sample rows to generate."
)
@click.option(
    "--parquet", type=click.Path(path_type=Path, exists=True), help="Load these Parquet files instead."
)
@click.option("--segment-id", help="Default: <table>-<start>-<random>.")
@click.option("--sub-partition", "value", help="Build this sub-partition value (needs --config).")
@click.option("--index", "indexes", multiple=True, help="An index built for the segment (repeatable).")
@config_option(required=False, text="Table config: sub-partitions and the `kafka:` block")
@warehouse_option
@bootstrap_option
@segments_topic_option
@spark_options
def load(
    table: str,
    start: datetime,
    end: datetime | None,
    rows: int,
    parquet: Path | None,
    segment_id: str | None,
    value: str | None,
    indexes: tuple[str, ...],
    config_path: Path | None,
    warehouse: str,
    bootstrap_servers: str,
    segments_topic: str,
) -> None:
    """Write one segment (or one sub-partition of it) and publish its SegmentCompleted event."""
    from pyspark.sql import functions as F

    from compactor.client.loader import load_segment, load_sub_partition, sample_rows
    from compactor.delta.predicates import sub_partition_literal
    from compactor.kafka.producer import EventProducer
    from compactor.kafka.topics import ensure_topics

    if value is not None and config_path is None:
        raise click.UsageError("--sub-partition needs --config (the table's declared sub-partition column)")
    config = load_optional_config(config_path)
    kafka = kafka_settings(bootstrap_servers, config, segments_topic)
    ensure_topics(kafka, [kafka.segments_topic])
    spark = spark_session("compactor-load", config, (warehouse,))
    finish = end or start + timedelta(days=1)
    data = spark.read.parquet(str(parquet)) if parquet else sample_rows(spark, start, finish, rows)
    producer = EventProducer(kafka)
    try:
        if value is not None and config is not None:
            settings = config.for_table(table)
            sub = settings.sub_partition
            if sub is not None and not parquet:  # sample rows get the value as their column
                data = data.withColumn(sub.column, F.expr(sub_partition_literal(sub, value)))
            segment = load_sub_partition(
                spark,
                warehouse,
                kafka,
                producer,
                settings,
                table,
                data,
                start,
                finish,
                value,
                segment_id,
                indexes=indexes,
            )
        else:
            segment = load_segment(
                spark, warehouse, kafka, producer, table, data, start, finish, segment_id, indexes=indexes
            )
    finally:
        producer.close()
    click.echo(f"loaded {segment.id} {segment.range}: {segment.records} rows, {segment.bytes} bytes")

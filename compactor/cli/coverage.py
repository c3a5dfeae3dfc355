"""`compactor coverage`: which segments and sub-partitions can answer a question."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click

from compactor.cli.options import config_option, instant, spark_options, spark_session, warehouse_option
from compactor.errors import CompactorError


@click.command()
@click.option("--table", required=True, help="The table asked about.")
@click.option("--from", "start", callback=instant, help="Inclusive start (default: the first segment's).")
@click.option("--to", "end", callback=instant, help="Exclusive end (default: the last segment's).")
@click.option(
    "--sub-partition", "values", multiple=True, help="Asked value (repeatable; default: all declared)."
)
@click.option(
    "--index",
    "able",
    multiple=True,
    help="An index that can serve the question (repeatable); default: list the segments' indexes to judge.",
)
@config_option(required=True, text="Table config (the declared sub-partition values)")
@warehouse_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@spark_options
def coverage(
    table: str,
    start: datetime | None,
    end: datetime | None,
    values: tuple[str, ...],
    able: tuple[str, ...],
    config_path: Path,
    warehouse: str,
    as_json: bool,
) -> None:
    """Which segments, sub-partitions and indexes can answer a time range and values."""
    from compactor.config.loading import load_config_file
    from compactor.delta.log.reads import read_catalog
    from compactor.rules.coverage import coverage as answer
    from compactor.rules.coverage import render
    from compactor.rules.engine import offline_reason

    project = load_config_file(config_path)
    settings = project.for_table(table)
    spark = spark_session("compactor-coverage", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    segments = read_catalog(spark, warehouse, table).segments(table)
    offline = offline_reason(settings, segments)
    if offline is not None:
        raise CompactorError(f"table {table}: {offline}")
    declared = settings.sub_partition.values if settings.sub_partition else ()
    pushdown = settings.sub_partition.pushdown if settings.sub_partition else True
    result = answer(segments, declared, start, end, values, able, pushdown)
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else render(result))

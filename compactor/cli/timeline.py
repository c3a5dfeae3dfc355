"""`compactor timeline`: a picture of one table's segments over time, level by level."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import click

from compactor.cli.options import chosen_tables, config_option, spark_options, spark_session, warehouse_option


@click.command()
@click.option("--table", required=True, help="The table to draw.")
@config_option(required=False, text="Config whose `spark:` block reaches the warehouse")
@warehouse_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The picture to write: a .png or .svg file.",
)
@click.option(
    "--recent-hours",
    type=click.FloatRange(min=0, min_open=True),
    default=6.0,
    show_default=True,
    help="Outline the outputs of merges committed this many hours ago or later.",
)
@spark_options
def timeline(table: str, config_path: Path | None, warehouse: str, out: Path, recent_hours: float) -> None:
    """Draw TABLE's segments: event time across, one row per level and sub-partition set, each
    segment a box coloured by size, hatched while not ONLINE, recent merges outlined."""
    from compactor.config.loading import load_config_file
    from compactor.delta.spark_store import SparkTableStore
    from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
    from compactor.domain.clock import now_utc
    from compactor.observe.pictures.timeline import layout
    from compactor.observe.pictures.timeline_plot import save
    from compactor.observe.status.warehouse_status import table_segments

    project = load_config_file(config_path) if config_path else None
    spark = spark_session("compactor-timeline", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    store = SparkTableStore(spark, warehouse)
    chosen_tables(store, (table,), warehouse)
    segments = table_segments(
        spark, warehouse, DeltaCatalogStore(spark, warehouse, writer=False).load(), table
    )
    drawn = layout(table, segments, store.history(table), now_utc(), timedelta(hours=recent_hours))
    save(drawn, out)
    click.echo(f"{out}: {drawn.describe()}")

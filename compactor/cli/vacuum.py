"""`compactor vacuum`: delete the files of replaced segments older than each table's retention."""

from __future__ import annotations

from pathlib import Path

import click

from compactor.cli.options import chosen_tables, config_option, spark_options, spark_session, warehouse_option


@click.command()
@click.option(
    "--table", "tables", multiple=True, help="A table to vacuum (repeatable); default: every table."
)
@click.option("--dry-run", is_flag=True, help="List the files that would be deleted; delete nothing.")
@config_option(required=True, text="Table config (each table's `vacuum:` retention)")
@warehouse_option
@spark_options
def vacuum(tables: tuple[str, ...], dry_run: bool, config_path: Path, warehouse: str) -> None:
    """Delete the files no table version inside the retention needs (Delta's VACUUM)."""
    from compactor.config.loading import load_config_file
    from compactor.delta.spark_store import SparkTableStore

    project = load_config_file(config_path)
    spark = spark_session("compactor-vacuum", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    store = SparkTableStore(spark, warehouse)
    for table in chosen_tables(store, tables, warehouse):
        config = project.for_table(table).vacuum
        report = store.vacuum(table, config, dry_run=dry_run)
        if dry_run:
            click.echo(f"{table}: {len(report.files)} file(s) replaced more than {config.retention} ago")
            for path in report.files:
                click.echo(f"  {path}")
        else:
            click.echo(f"{table}: files replaced more than {config.retention} ago deleted")

"""`compactor upsert view`: the latest row per key as plain SQL, for readers who never import this package."""

from __future__ import annotations

import re
from pathlib import Path

import click

from compactor.cli.options import config_option, spark_options, spark_session, warehouse_option
from compactor.errors import ConfigError

_VIEW_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")


@click.group()
def upsert() -> None:
    """Upsert tables: how readers get the latest row per key."""


@upsert.command("view")
@click.option("--table", required=True, help="The upsert table.")
@click.option("--name", "view_name", help="The view's name (default: <table>_latest).")
@click.option("--create", is_flag=True, help="Create the view in Spark's catalog instead of printing it.")
@config_option(required=True, text="Table config (the table's `upsert` keys)")
@warehouse_option
@spark_options
def view(table: str, view_name: str | None, create: bool, config_path: Path, warehouse: str) -> None:
    """Print (or create) `CREATE OR REPLACE VIEW ... AS SELECT ...` returning one row per key,
    with the compactor's tie-breaking: comparison column, then the later load, then the row hash."""
    from compactor.config.loading import load_config_file
    from compactor.delta.rewrite.upsert import view_sql

    project = load_config_file(config_path)
    settings = project.for_table(table)
    if settings.upsert is None:
        raise ConfigError(f"table {table!r} is not an upsert table: its config has no `upsert` block")
    name = view_name or f"{table}_latest"
    if not _VIEW_NAME.match(name):
        raise ConfigError(f"view name {name!r} is not a plain (optionally qualified) SQL name")
    spark = spark_session("compactor-upsert-view", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    statement = f"CREATE OR REPLACE VIEW {name} AS\n{view_sql(spark, warehouse, table, settings.upsert)}"
    if create:
        spark.sql(statement)
        click.echo(f"created view {name}")
    else:
        click.echo(statement + ";")

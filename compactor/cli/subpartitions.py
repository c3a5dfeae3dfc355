"""`compactor subpartitions list|search|delete`: manage a table's sub-partition values (Kylin's
multi-level partitions)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import click

from compactor.cli.options import (
    bootstrap_option,
    config_option,
    segments_topic_option,
    spark_options,
    spark_session,
    warehouse_option,
)
from compactor.cli.request import publish_request


@click.group("subpartitions")
def subpartitions() -> None:
    """List, search and delete a table's sub-partition values."""


def _show(table: str, config_path: Path, warehouse: str, search: str | None, as_json: bool) -> None:
    from compactor.catalog.sub_partition_values import render_usage, value_usage
    from compactor.config.loading import load_config_file
    from compactor.delta.log.reads import read_catalog

    project = load_config_file(config_path)
    sub = project.for_table(table).sub_partition
    if sub is None:
        raise click.UsageError(f"table {table} declares no sub-partition column in {config_path}")
    spark = spark_session("compactor-subpartitions", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    segments = read_catalog(spark, warehouse, table).segments(table)
    usages = value_usage(segments, sub.values, search)
    if as_json:
        click.echo(json.dumps([u.to_json() for u in usages], indent=2))
    else:
        click.echo(f"table {table}, column {sub.column}, {len(segments)} segment(s)")
        click.echo(render_usage(usages, len(segments)))


_table = click.option("--table", required=True, help="The table whose values are managed.")
_as_json = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


@subpartitions.command("list")
@_table
@config_option(required=True, text="Table config (the declared sub-partition values)")
@warehouse_option
@_as_json
@spark_options
def list_values(table: str, config_path: Path, warehouse: str, as_json: bool) -> None:
    """Every value: declared or not, the segments that built it, those being built."""
    _show(table, config_path, warehouse, None, as_json)


@subpartitions.command("search")
@_table
@click.argument("text")
@config_option(required=True, text="Table config (the declared sub-partition values)")
@warehouse_option
@_as_json
@spark_options
def search_values(table: str, text: str, config_path: Path, warehouse: str, as_json: bool) -> None:
    """The values containing TEXT (case-insensitive), as `list` shows them."""
    _show(table, config_path, warehouse, text, as_json)


@subpartitions.command("delete")
@_table
@click.option("--value", required=True, help="The sub-partition value whose rows leave every segment.")
@config_option(required=False, text="Config whose `kafka:` block the producer uses")
@bootstrap_option
@segments_topic_option
def delete_value(
    table: str, value: str, config_path: Path | None, bootstrap_servers: str, segments_topic: str
) -> None:
    """Ask the running job to delete a value's rows from every segment, in one commit.

    Remove the value from the table's declared values too (`config apply`), or new
    loads may build it again.
    """
    from compactor.domain.clock import now_utc
    from compactor.domain.events import CompactionRequested

    event = CompactionRequested(uuid.uuid4().hex, table, now_utc(), delete_sub_partition=value)
    publish_request(event, config_path, bootstrap_servers, segments_topic)
    click.echo(f"requested deletion of sub-partition value {value!r} on {table} (request {event.request_id})")

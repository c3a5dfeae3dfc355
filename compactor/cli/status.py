"""`compactor status`: what each table holds, waits for and last merged; read from the warehouse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from compactor.cli.options import (
    chosen_tables,
    config_option,
    jobs_checkpoint_option,
    kafka_settings,
    segments_topic_option,
    spark_options,
    spark_session,
    warehouse_option,
)
from compactor.errors import CompactorError
from compactor.observe.status.shard_status import render_shards

if TYPE_CHECKING:
    pass


@click.command()
@click.option("--table", "tables", multiple=True, help="A table (repeatable); default: every table.")
@config_option(required=True, text="Table config (the rules that say what is ready to merge)")
@warehouse_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--top", type=click.IntRange(1), help="List only the N least healthy tables (health, then status)."
)
@click.option(
    "--shards",
    "only_shards",
    is_flag=True,
    help="Print only the shards: which job runs each, how far behind it is, and its tables.",
)
@click.option(
    "--bootstrap-servers",
    envvar="KAFKA_BOOTSTRAP_SERVERS",
    help="Kafka, to show which job runs each shard and its lag (env KAFKA_BOOTSTRAP_SERVERS).",
)
@segments_topic_option
@jobs_checkpoint_option
@spark_options
def status(
    tables: tuple[str, ...],
    config_path: Path,
    warehouse: str,
    as_json: bool,
    top: int | None,
    only_shards: bool,
    bootstrap_servers: str | None,
    segments_topic: str,
    checkpoint: str,
) -> None:
    """Per table: segments by level and state, what is ready to merge, the last merges, the switch;
    and, for a warehouse run in shards, which job runs each shard, its lag and its tables.

    Reads the catalog the job saves and the tables' history, so it works while the job runs."""
    from compactor.config.loading import load_config_file
    from compactor.delta.spark_store import SparkTableStore
    from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
    from compactor.domain.clock import now_utc
    from compactor.job.lease_log import lease_lines, read_lease_logs
    from compactor.observe.status.table_health import least_healthy
    from compactor.observe.status.table_status import render, render_top
    from compactor.observe.status.warehouse_status import shard_section, table_report
    from compactor.stream.outage_log import outage_lines

    project = load_config_file(config_path)
    spark = spark_session("compactor-status", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    store = SparkTableStore(spark, warehouse)
    kafka = kafka_settings(bootstrap_servers, project, segments_topic) if bootstrap_servers else None
    shards = shard_section(spark, warehouse, segments_topic, checkpoint, store, kafka)
    leases = lease_lines(read_lease_logs(store.files, warehouse)) + outage_lines(store.files, warehouse)
    if only_shards:
        if shards is None:
            raise CompactorError(
                f"{warehouse} is not run in shards (operations.shards is 1, no shard record)"
            )
        click.echo(
            json.dumps([s.to_json() for s in shards[1]], indent=2)
            if as_json
            else "\n".join([render_shards(*shards), *leases])
        )
        return
    stored = DeltaCatalogStore(spark, warehouse, writer=False).load()
    now = now_utc()
    found = [
        table_report(spark, warehouse, store, stored, project, table, now)
        for table in chosen_tables(store, tables, warehouse)
    ]
    if top is not None:
        ranked = least_healthy({s.table: s.health for s in found if s.health is not None}, top)
        click.echo(
            json.dumps([{"table": t, **h.to_json()} for t, h in ranked], indent=2)
            if as_json
            else render_top(ranked)
        )
        return
    if as_json:
        click.echo(json.dumps([s.to_json() for s in found], indent=2))
    else:
        if shards is not None:
            click.echo(render_shards(*shards))
        if leases:
            click.echo("\n".join(leases))
        click.echo("\n".join(render(s) for s in found) or f"no tables in {warehouse}")

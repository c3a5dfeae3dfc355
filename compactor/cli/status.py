"""`compactor status`: what each table holds, waits for and last merged; read from the warehouse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from compactor.cli.options import (
    DEFAULT_HOME,
    chosen_tables,
    config_option,
    segments_topic_option,
    spark_options,
    spark_session,
    warehouse_option,
)
from compactor.errors import CompactorError
from compactor.kafka.shards import ShardLayout
from compactor.observe.shard_status import ShardStatus, render_shards, shard_statuses

if TYPE_CHECKING:
    from compactor.domain.segments import Segment


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
@click.option(
    "--checkpoint",
    default=str(DEFAULT_HOME / "checkpoint"),
    show_default=True,
    help="The jobs' --checkpoint, to read how far each shard's query has got.",
)
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
    from compactor.config.sort import describe
    from compactor.delta.catalog_table import DeltaCatalogStore
    from compactor.delta.spark_store import SparkTableStore
    from compactor.domain.clock import now_utc
    from compactor.domain.columns import SegmentColumns
    from compactor.observe.status import DeletedRows, offline_health, render, render_top, table_status
    from compactor.observe.table_health import least_healthy
    from compactor.rules.due import table_due
    from compactor.rules.engine import evaluate
    from compactor.rules.late_data import summary
    from compactor.stream.lease_log import lease_lines, read_lease_logs
    from compactor.stream.runner import quarantine_error

    project = load_config_file(config_path)
    spark = spark_session("compactor-status", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    store = SparkTableStore(spark, warehouse)
    shards = shard_section(spark, project, warehouse, bootstrap_servers, segments_topic, checkpoint, store)
    leases = lease_lines(read_lease_logs(store.files, warehouse))
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
    found, now = [], now_utc()
    for table in chosen_tables(store, tables, warehouse):
        segments = table_segments(spark, warehouse, stored, table)
        mark = stored.marks.get(table)
        settings = project.for_table(table)
        ready = evaluate(table, segments, settings, now, explain=False).ready
        merging, failures, debt = (mark.merging, mark.failures, mark.debt) if mark else (True, (), None)
        history = store.history(table)
        late = summary(segments, project.for_table(table).rules)
        cooling = [(f.key, f.until) for f in failures]
        due = table_due(SegmentColumns.of(segments), settings, now, cooling, project.operations.off_peak)
        layout = describe(settings.layout_order)
        deleted = DeletedRows.of(store.row_counts(table).values(), settings.purge_deleted_ratio)
        commits = store.commit_path(table)
        quarantine = quarantine_error(mark.quarantine)[0] if mark and mark.quarantine else None
        health = offline_health(
            merging,
            quarantine,
            ready,
            failures,
            deleted,
            sum(s.bytes for s in segments),
            settings.max_debt,
            now,
        )
        found.append(
            table_status(
                table,
                merging,
                segments,
                ready,
                history,
                failures,
                now,
                debt,
                late,
                due,
                layout,
                deleted,
                commits,
                health=health,
            )
        )
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


def table_segments(spark: Any, warehouse: str, stored: Any, table: str) -> list[Segment]:
    """The table's segments from the job's saved catalog; a table the job has not seen yet, from
    the table's own history."""
    from compactor.delta.reads import read_catalog

    return list(stored.segments.get(table) or read_catalog(spark, warehouse, table).segments(table))


def shard_section(
    spark: Any, project: Any, warehouse: str, bootstrap: str | None, topic: str, checkpoint: str, store: Any
) -> tuple[ShardLayout, list[ShardStatus]] | None:
    """The warehouse's shards as recorded, with each one's job and lag when Kafka is given."""
    from compactor.cli.options import kafka_settings
    from compactor.delta.files import HadoopFiles
    from compactor.delta.paths import warehouse_uri
    from compactor.delta.shard_record import processed_offsets, read_record
    from compactor.kafka.lease import group_owners, lease_group
    from compactor.kafka.topics import end_offsets

    files = HadoopFiles(spark)
    record = read_record(files, warehouse, topic)
    if record is None or record.shards == 1:
        return None
    layout = ShardLayout(topic, record.shards, record.partitions)
    processed = processed_offsets(files, checkpoint, record, topic)
    owners: dict[int, str] = {}
    ends = None
    if bootstrap:
        kafka = kafka_settings(bootstrap, project, topic)
        owners = group_owners(kafka, lease_group(kafka, warehouse_uri(warehouse), record.shards))
        ends = end_offsets(kafka, topic, range(record.partitions))
    return layout, shard_statuses(layout, owners, processed, ends, store.tables())

"""`compactor status`: what each table holds, waits for and last merged; read from the warehouse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from compactor.cli.options import chosen_tables, config_option, spark_options, spark_session, warehouse_option

if TYPE_CHECKING:
    from compactor.domain.segments import Segment


@click.command()
@click.option("--table", "tables", multiple=True, help="A table (repeatable); default: every table.")
@config_option(required=True, text="Table config (the rules that say what is ready to merge)")
@warehouse_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@spark_options
def status(tables: tuple[str, ...], config_path: Path, warehouse: str, as_json: bool) -> None:
    """Per table: segments by level and state, what is ready to merge, the last merges, the switch.

    Reads the catalog the job saves and the tables' history, so it works while the job runs."""
    from compactor.config.loading import load_config_file
    from compactor.config.sort import describe
    from compactor.delta.catalog_table import DeltaCatalogStore
    from compactor.delta.spark_store import SparkTableStore
    from compactor.domain.clock import now_utc
    from compactor.domain.columns import SegmentColumns
    from compactor.observe.status import DeletedRows, render, table_status
    from compactor.rules.due import table_due
    from compactor.rules.engine import evaluate
    from compactor.rules.late_data import summary

    project = load_config_file(config_path)
    spark = spark_session("compactor-status", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    store = SparkTableStore(spark, warehouse)
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
        found.append(
            table_status(
                table, merging, segments, ready, history, failures, now, debt, late, due, layout, deleted
            )
        )
    if as_json:
        click.echo(json.dumps([s.to_json() for s in found], indent=2))
    else:
        click.echo("\n".join(render(s) for s in found) or f"no tables in {warehouse}")


def table_segments(spark: Any, warehouse: str, stored: Any, table: str) -> list[Segment]:
    """The table's segments from the job's saved catalog; a table the job has not seen yet, from
    the table's own history."""
    from compactor.delta.reads import read_catalog

    return list(stored.segments.get(table) or read_catalog(spark, warehouse, table).segments(table))

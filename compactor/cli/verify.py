"""`compactor verify`: check a table's rewrite commits against their content certificates."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from compactor.cli.options import chosen_tables, config_option, spark_options, spark_session, warehouse_option

BROKEN = 1  # a merge's rows are not what its inputs held, or not what it certified


@click.command()
@click.argument("table")
@click.option(
    "--since",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Check the merge, refresh and purge commits from this table version on.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of lines.")
@config_option(required=False, text="Config whose `spark:` block reaches the warehouse")
@warehouse_option
@spark_options
def verify(table: str, since: int, as_json: bool, config_path: Path | None, warehouse: str) -> None:
    """Re-read every merge, refresh and purge commit of TABLE still in Delta's log: its inputs at
    the version before, its output at its own (time travel), fingerprinted and checked against
    the certificate it committed. One line per commit that does not hold or cannot be checked,
    then a summary; exit status 1 when any does not hold."""
    from compactor.config.loading import load_config_file
    from compactor.delta.content.verify import verify_table
    from compactor.delta.spark_store import SparkTableStore

    project = load_config_file(config_path) if config_path else None
    spark = spark_session("compactor-verify", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    chosen_tables(SparkTableStore(spark, warehouse), (table,), warehouse)
    checked = list(verify_table(spark, warehouse, table, since))
    counts = {v: sum(1 for c in checked if c.verdict == v) for v in ("holds", "broken", "not checkable")}
    if as_json:
        click.echo(
            json.dumps(
                {"table": table, "since": since, "counts": counts, "merges": [c.to_dict() for c in checked]}
            )
        )
    else:
        for found in checked:
            if found.verdict != "holds":
                click.echo(found.line())
        click.echo(
            f"{table}: {len(checked)} rewrite commit(s) from version {since}: {counts['holds']} hold, "
            f"{counts['broken']} broken, {counts['not checkable']} not checkable"
        )
    if counts["broken"]:
        sys.exit(BROKEN)

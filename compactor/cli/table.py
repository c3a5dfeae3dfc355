"""`compactor table disable|enable|cancel`: the per-table merging switch, and the cancel of a
merge in flight, taken by the running job."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
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


@click.group("table")
def table_group() -> None:
    """Turn a table's merging off or on, or cancel one of its merges in flight, without a restart
    or a config version."""


def _switch(
    table: str, enabled: bool, config_path: Path | None, bootstrap_servers: str, segments_topic: str
) -> None:
    from compactor.domain.clock import now_utc
    from compactor.domain.events import CompactionRequested

    event = CompactionRequested(uuid.uuid4().hex, table, now_utc(), merging=enabled)
    publish_request(event, config_path, bootstrap_servers, segments_topic)
    state = "on" if enabled else "off"
    click.echo(
        f"merging on {table} turned {state} (request {event.request_id}); the running job takes it in order"
    )


def _command(name: str, enabled: bool, text: str) -> click.Command:
    @table_group.command(name, help=text)
    @click.argument("table")
    @config_option(required=False, text="Config whose `kafka:` block the producer uses")
    @bootstrap_option
    @segments_topic_option
    def command(table: str, config_path: Path | None, bootstrap_servers: str, segments_topic: str) -> None:
        _switch(table, enabled, config_path, bootstrap_servers, segments_topic)

    return command


disable = _command(
    "disable", False, "No new merge or refresh starts on TABLE (one running finishes); kept across restarts."
)


@table_group.command("enable")
@click.argument("table", required=False)
@click.option(
    "--quarantined",
    "all_quarantined",
    is_flag=True,
    help="Instead of TABLE: every table the warehouse's catalog holds quarantined (read with Spark).",
)
@click.option(
    "--reason",
    metavar="TEXT",
    help="With --quarantined: only the tables whose quarantine error contains TEXT (any case).",
)
@warehouse_option
@config_option(required=False, text="Config whose `kafka:` block the producer uses")
@bootstrap_option
@segments_topic_option
@spark_options
def enable(
    table: str | None,
    all_quarantined: bool,
    reason: str | None,
    warehouse: str,
    config_path: Path | None,
    bootstrap_servers: str,
    segments_topic: str,
) -> None:
    """Merging on TABLE again (released from quarantine); its rules are evaluated at once.

    After an outage that quarantined many tables, `--quarantined` releases every quarantined
    table at once, or with `--reason TEXT` those whose error names TEXT."""
    if (table is None) == (not all_quarantined):
        raise click.UsageError("name a TABLE, or give --quarantined (not both)")
    if reason is not None and not all_quarantined:
        raise click.UsageError("--reason selects among --quarantined tables; it needs --quarantined")
    if table is not None:
        _switch(table, True, config_path, bootstrap_servers, segments_topic)
        return
    chosen = quarantined_tables(read_quarantines(warehouse, config_path), reason)
    if not chosen:
        which = f" whose error contains {reason!r}" if reason else ""
        click.echo(f"no table quarantined{which} in {warehouse}")
        return
    for name, error in chosen:
        click.echo(f"{name}: quarantined for {error}")
        _switch(name, True, config_path, bootstrap_servers, segments_topic)
    click.echo(f"{len(chosen)} table(s) released")


def read_quarantines(warehouse: str, config_path: Path | None) -> dict[str, str]:
    """Table -> its quarantine note, as the warehouse's catalog holds them (every shard's)."""
    from compactor.config.loading import load_config_file
    from compactor.delta.warehouse.catalog_table import DeltaCatalogStore

    project = load_config_file(config_path) if config_path is not None else None
    spark = spark_session("compactor-table-enable", project, (warehouse,))
    spark.sparkContext.setLogLevel("ERROR")
    marks = DeltaCatalogStore(spark, warehouse, writer=False).load().marks
    return {name: mark.quarantine for name, mark in marks.items() if mark.quarantine}


def quarantined_tables(notes: Mapping[str, str], reason: str | None) -> list[tuple[str, str]]:
    """(table, its error) of the quarantined tables whose error contains `reason` (any case)."""
    from compactor.stream.table_failures import quarantine_error

    found = [(name, quarantine_error(note)[0]) for name, note in sorted(notes.items())]
    return [(n, e) for n, e in found if reason is None or reason.casefold() in e.casefold()]


@table_group.command("cancel")
@click.argument("table")
@click.argument("plan_id")
@config_option(required=False, text="Config whose `kafka:` block the producer uses")
@bootstrap_option
@segments_topic_option
def cancel(
    table: str, plan_id: str, config_path: Path | None, bootstrap_servers: str, segments_topic: str
) -> None:
    """Cancel TABLE's merge running under PLAN_ID.

    PLAN_ID is a plan's id (24 hex digits, as `status --json` and MergeResult events show it).
    The merge is reported FAILED and tried again after its cool-down: `table disable` TABLE
    first to keep it from coming back."""
    from compactor.domain.clock import now_utc
    from compactor.domain.events import CompactionRequested
    from compactor.domain.plans import validate_plan_id
    from compactor.domain.segments import validate_table_name

    # checked here, before the broker is asked: a typo fails at once instead of dead-lettering
    event = CompactionRequested(
        uuid.uuid4().hex, validate_table_name(table), now_utc(), cancel_plan=validate_plan_id(plan_id)
    )
    publish_request(event, config_path, bootstrap_servers, segments_topic)
    click.echo(
        f"cancel of plan {plan_id} on {table} requested (request {event.request_id}); the running job "
        "takes it in order"
    )

"""`compactor table disable|enable|cancel`: the per-table merging switch, and the cancel of a
merge in flight, taken by the running job."""

from __future__ import annotations

import uuid
from pathlib import Path

import click

from compactor.cli.options import bootstrap_option, config_option, segments_topic_option
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
enable = _command("enable", True, "Merging on TABLE again; its rules are evaluated at once.")


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

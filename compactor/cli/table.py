"""`compactor table disable|enable`: the per-table merging switch, taken by the running job."""

from __future__ import annotations

import uuid
from pathlib import Path

import click

from compactor.cli.options import bootstrap_option, config_option, segments_topic_option
from compactor.cli.request import publish_request


@click.group("table")
def table_group() -> None:
    """Turn a table's merging off or on without a restart or a config version."""


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

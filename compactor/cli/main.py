"""The `compactor` command: one group, one error handler, thin commands over the library."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from compactor.cli.configs import config_group
from compactor.cli.coverage import coverage
from compactor.cli.load import load
from compactor.cli.local import demo, jars, kafka
from compactor.cli.plan import plan
from compactor.cli.request import request
from compactor.cli.run import run
from compactor.cli.subpartitions import subpartitions
from compactor.cli.table import table_group
from compactor.cli.upsert import upsert
from compactor.cli.vacuum import vacuum
from compactor.errors import CompactorError

log = logging.getLogger(__name__)

USAGE_ERROR = 2  # bad input: a config, a file, an option


class CompactorGroup(click.Group):
    """Every command's errors end the same way: `error: ...` on stderr and an exit status,
    with the traceback only under --verbose."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except (CompactorError, OSError) as exc:
            if ctx.meta.get("verbose"):
                log.exception("command failed")
            click.echo(f"error: {exc}", err=True)
            sys.exit(USAGE_ERROR)


@click.group(cls=CompactorGroup)
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level and show tracebacks.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Event-driven compactor for Delta Lake segments."""
    ctx.meta["verbose"] = verbose
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


commands = (
    run,
    load,
    request,
    plan,
    coverage,
    subpartitions,
    table_group,
    vacuum,
    config_group,
    upsert,
    kafka,
    jars,
    demo,
)
for command in commands:
    main.add_command(command)

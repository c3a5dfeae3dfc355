"""The `compactor` command: one group, one error handler, thin commands over the library."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
from confluent_kafka import KafkaException

from compactor.cli.configs import config_group
from compactor.cli.coverage import coverage
from compactor.cli.load import load
from compactor.cli.local import demo, jars, kafka
from compactor.cli.plan import plan
from compactor.cli.request import request
from compactor.cli.run import run
from compactor.cli.status import status
from compactor.cli.subpartitions import subpartitions
from compactor.cli.table import table_group
from compactor.cli.timeline import timeline
from compactor.cli.upsert import upsert
from compactor.cli.vacuum import vacuum
from compactor.errors import CompactorError, ServiceUnreachable
from compactor.kafka.settings import LIBRDKAFKA_LOG

log = logging.getLogger(__name__)

USAGE_ERROR = 2  # bad input: a config, a file, an option
UNREACHABLE = 3  # a service the command needs did not answer (the Kafka broker)


class CompactorGroup(click.Group):
    """Every command's errors end the same way: `error: ...` on stderr and an exit status,
    with the traceback only under --verbose."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except (ServiceUnreachable, KafkaException) as exc:
            _report(ctx, exc)
            sys.exit(UNREACHABLE)
        except (CompactorError, OSError) as exc:
            _report(ctx, exc)
            sys.exit(USAGE_ERROR)


def _report(ctx: click.Context, exc: BaseException) -> None:
    if ctx.meta.get("verbose"):
        log.exception("command failed")
    detail = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args else str(exc)
    click.echo(f"error: {detail}", err=True)


@click.group(cls=CompactorGroup)
@click.version_option(package_name="streaming-compactor", prog_name="compactor")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level and show tracebacks.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Event-driven compactor for Delta Lake segments."""
    ctx.meta["verbose"] = verbose
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # librdkafka retries what it logs; a command reports the failure that matters in one line
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG if verbose else logging.CRITICAL)


commands = (
    run,
    load,
    request,
    plan,
    coverage,
    subpartitions,
    status,
    timeline,
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

"""The `compactor` command: one group, one error handler, thin commands over the library."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
from confluent_kafka import KafkaException
from pythonjsonlogger.json import JsonFormatter

from compactor.cli.configs import config_group
from compactor.cli.console import console
from compactor.cli.coverage import coverage
from compactor.cli.events import events_group
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
from compactor.cli.verify import verify
from compactor.errors import CompactorError, LeaseHeld, ServiceUnreachable
from compactor.kafka.failures import kafka_reason
from compactor.kafka.settings import LIBRDKAFKA_LOG

log = logging.getLogger(__name__)
JSON_FIELDS = ["levelname", "name", "message"]

USAGE_ERROR = 2  # bad input: a config, a file, an option
UNREACHABLE = 3  # a service the command needs did not answer (the Kafka broker)
LEASE_HELD = 4  # another `compactor run` controls this warehouse and topic (or this one lost it)
SILENT = logging.CRITICAL + 1  # a logger's level at which it says nothing


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
        except LeaseHeld as exc:
            _report(ctx, exc)
            sys.exit(LEASE_HELD)
        except (CompactorError, OSError) as exc:
            _report(ctx, exc)
            sys.exit(USAGE_ERROR)


def _report(ctx: click.Context, exc: BaseException) -> None:
    if ctx.meta.get("verbose"):
        log.exception("command failed")
    detail = kafka_reason(exc) if isinstance(exc, KafkaException) else str(exc)
    if ctx.meta.get("log_format") == "json":
        log.error("error: %s", detail)
    else:
        click.echo(f"error: {detail}", err=True)


@click.group(cls=CompactorGroup)
@click.version_option(package_name="streaming-compactor", prog_name="compactor")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level and show tracebacks.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per log line (and per operator message of `run`), for log collectors.",
)
@click.pass_context
def main(ctx: click.Context, verbose: bool, log_format: str) -> None:
    """Event-driven compactor for Delta Lake segments."""
    ctx.meta["verbose"] = verbose
    ctx.meta["log_format"] = log_format
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter(JSON_FIELDS, rename_fields={"levelname": "level", "name": "logger"}, timestamp=True)
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    # librdkafka retries what it logs; a command reports the failure that matters in one line, so
    # even its fatal errors stay out of the way (the one line says them; `run` keeps them in its log)
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG if verbose else SILENT)


commands = (
    run,
    load,
    request,
    plan,
    coverage,
    subpartitions,
    status,
    console,
    timeline,
    table_group,
    vacuum,
    verify,
    config_group,
    upsert,
    events_group,
    kafka,
    jars,
    demo,
)
for command in commands:
    main.add_command(command)

"""Commands for a machine of one's own: a local Kafka broker, the jars, the demo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from compactor.cli.options import DEFAULT_HOME

data_dir_option = click.option(
    "--dir",
    "data_dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_HOME / "kafka",
    show_default=True,
    help="The broker's state directory.",
)


@click.group()
def kafka() -> None:
    """A local single-node Kafka broker (KRaft) from Apache Kafka's jars."""


@kafka.command("start")
@data_dir_option
@click.option("--port", type=click.IntRange(1, 65535), help="Default: a free port.")
def kafka_start(data_dir: Path, port: int | None) -> None:
    """Start the broker in the background and print its bootstrap address."""
    from compactor.dev.kafka_broker import LocalKafkaBroker, running_bootstrap

    existing = running_bootstrap(data_dir)
    click.echo(existing or LocalKafkaBroker(data_dir, port).start())


@kafka.command("stop")
@data_dir_option
def kafka_stop(data_dir: Path) -> None:
    """Stop the broker started from this directory."""
    from compactor.dev.kafka_broker import stop_from_dir

    click.echo("stopped" if stop_from_dir(data_dir) else "no broker running")


@click.command()
@click.option(
    "--spark-submit-args",
    "submit_args",
    is_flag=True,
    help="Print the arguments that give spark-submit the jars and Delta's settings, on one line.",
)
@click.option("--s3", is_flag=True, help="Add Hadoop's S3A connector (for s3a:// locations).")
@click.option("--gcs", is_flag=True, help="Add Google's GCS connector (for gs:// locations).")
@click.option("--spark-only", is_flag=True, help="Only Spark's jars, not the local Kafka broker's.")
@click.option(
    "--local-jars",
    is_flag=True,
    help="With --spark-submit-args: --jars with the cached files instead of --packages.",
)
@click.option(
    "--class-archive",
    "archive",
    is_flag=True,
    help="Also build the driver JVM's class-data-sharing archive for these jars (about 20 s, "
    "150 MB): later starts map it and start about 3 s sooner.",
)
def jars(submit_args: bool, s3: bool, gcs: bool, spark_only: bool, local_jars: bool, archive: bool) -> None:
    """Resolve and cache the JVM jars (Delta, Kafka connector, Kafka broker); print their paths."""
    import shlex

    from compactor.spark import class_archive, jvm
    from compactor.spark.session import jars_for, spark_submit_args

    stores = (*(("s3a://",) if s3 else ()), *(("gs://",) if gcs else ()))
    if submit_args:
        click.echo(shlex.join(spark_submit_args(stores, local_jars=local_jars)))
        return
    spark = jars_for(stores)
    if archive:
        try:
            click.echo(f"class archive: {class_archive.build(spark)}", err=True)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            raise click.ClickException(f"no class archive built: {exc}") from None
    for path in [*spark, *([] if spark_only else jvm.kafka_broker_jars())]:
        click.echo(path)


@click.command()
@click.option(
    "--workdir",
    type=click.Path(path_type=Path),
    default=DEFAULT_HOME / "demo",
    show_default=True,
    help="Scratch directory (emptied first).",
)
@click.option(
    "--days", type=click.IntRange(7, 366), default=31, show_default=True, help="Daily segments to load."
)
@click.option("--rows", type=click.IntRange(min=1), default=200, show_default=True, help="Rows per segment.")
def demo(workdir: Path, days: int, rows: int) -> None:
    """Load daily segments into a sample table and watch the compactor merge them."""
    from compactor.dev.demo import run_demo

    sys.exit(run_demo(workdir, days, rows, os.environ.get("KAFKA_BOOTSTRAP_SERVERS"), click.echo))

"""`compactor request`: ask the running job to run a rule now, or merge named segments."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import click

from compactor.cli.options import (
    bootstrap_option,
    config_option,
    kafka_settings,
    load_optional_config,
    rule_choice,
    segments_topic_option,
)

if TYPE_CHECKING:
    from compactor.domain.events import CompactionRequested


@click.command()
@click.option("--table", required=True, help="The table the request is for.")
@click.option("--rule", type=rule_choice, help="Run this configured rule once now (any trigger).")
@click.option("--merge", "merge_ids", help="Merge exactly these comma-separated segment ids.")
@config_option(required=False, text="Config whose `kafka:` block the producer uses")
@bootstrap_option
@segments_topic_option
def request(
    table: str,
    rule: str | None,
    merge_ids: str | None,
    config_path: Path | None,
    bootstrap_servers: str,
    segments_topic: str,
) -> None:
    """Ask the running job to run a rule now (e.g. a manual major) or merge named segments."""
    from compactor.domain.clock import now_utc
    from compactor.domain.events import CompactionRequested

    ids = tuple(i.strip() for i in (merge_ids or "").split(",") if i.strip())
    if (rule is None) == (not ids):
        raise click.UsageError("give exactly one of --rule or --merge")
    event = CompactionRequested(uuid.uuid4().hex, table, now_utc(), rule, ids)
    publish_request(event, config_path, bootstrap_servers, segments_topic)
    click.echo(f"requested {rule or 'merge of ' + ','.join(ids)} on {table} (request {event.request_id})")


def publish_request(
    event: CompactionRequested, config_path: Path | None, bootstrap_servers: str, segments_topic: str
) -> None:
    """Put an operator's request on the segments topic, keyed by its table (ordered with its loads)."""
    from compactor.kafka.codecs import codec_for
    from compactor.kafka.producer import EventProducer
    from compactor.kafka.topics import require_broker

    kafka = kafka_settings(bootstrap_servers, load_optional_config(config_path), segments_topic)
    require_broker(kafka)
    producer = EventProducer(kafka)
    try:
        producer.send_all(
            [(kafka.segments_topic, event.table, codec_for(kafka).encode_compaction_requested(event), None)]
        )
    finally:
        producer.close()

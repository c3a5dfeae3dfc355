"""`compactor events tail`: the compactor's topics, decoded, one event per line, for on-call engineers."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import click

from compactor.cli.options import bootstrap_option, config_option, kafka_settings, load_optional_config

TOPICS = ("segments", "results", "dead-letter", "advice")


@click.group("events")
def events_group() -> None:
    """Read the compactor's topics."""


@events_group.command()
@click.option("--topic", "which", type=click.Choice(TOPICS), required=True, help="Which of the topics.")
@click.option("--table", help="Only this table's events.")
@click.option(
    "--from-beginning", is_flag=True, help="Start at the topic's beginning (default: new events only)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line instead of text.")
@click.option(
    "--idle-timeout",
    type=float,
    default=None,
    help="Stop after this many seconds without an event (default: follow until interrupted).",
)
@config_option(required=False, text="Config whose `kafka:` block (topics, security, encoding) is used")
@bootstrap_option
def tail(
    which: str,
    table: str | None,
    from_beginning: bool,
    as_json: bool,
    idle_timeout: float | None,
    config_path: Path | None,
    bootstrap_servers: str,
) -> None:
    """Print each event of a topic as it arrives; a record that does not decode prints one line
    naming its offset and why, and the tail goes on. Both encodings are read."""
    from confluent_kafka import Consumer

    from compactor.kafka.codecs import codec_for
    from compactor.kafka.polling import messages
    from compactor.kafka.topics import require_broker

    kafka = kafka_settings(bootstrap_servers, load_optional_config(config_path))
    require_broker(kafka)
    topic = {
        "segments": kafka.segments_topic,
        "results": kafka.results_topic,
        "dead-letter": kafka.dead_letter_topic,
        "advice": kafka.advice_topic,
    }[which]
    decode = _decoder(which, codec_for(kafka))
    consumer = Consumer(
        kafka.librdkafka(
            **{
                "group.id": f"compactor-tail-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest" if from_beginning else "latest",
            }
        )
    )
    consumer.subscribe([topic])
    try:
        for message in messages(consumer, idle_timeout):
            line = _line(message, decode, table, as_json)
            if line is not None:
                click.echo(line)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()


def _line(
    message: Any, decode: Callable[[Any], dict[str, Any]], table: str | None, as_json: bool
) -> str | None:
    """The event as one line (None: another table's); a record that does not decode, as the line
    that says so."""
    where = f"{message.partition()}/{message.offset()}"
    try:
        event = decode(message)
    except Exception as exc:  # a bad record is reported and skipped: the tail goes on
        if table is not None and (message.key() or b"").decode(errors="replace") != table:
            return None  # keyed by another table (events are keyed by their table's name)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return (
            json.dumps({"offset": where, "error": reason}) if as_json else f"{where} cannot decode: {reason}"
        )
    if table is not None and event.get("table") != table:
        return None
    if as_json:
        return json.dumps({"offset": where, **event}, default=_plain)
    kind = event.pop("event")
    fields = " ".join(f"{k}={_plain(v)}" for k, v in event.items() if v not in (None, [], {}, ""))
    return f"{where} {kind} {fields}"


def _decoder(which: str, codec: Any) -> Callable[[Any], dict[str, Any]]:
    def segments(message: Any) -> dict[str, Any]:
        event = codec.decode_input(message.value())
        if hasattr(event, "segment"):  # SegmentCompleted: the segment's fields, flat
            s = event.segment
            return {
                "event": type(event).__name__,
                "table": s.table,
                "segment_id": s.id,
                "start": s.start,
                "end": s.end,
                "records": s.records,
                "bytes": s.bytes,
                "origin": s.origin,
                "action": event.action,
                "plan_id": event.plan_id,
            }
        return {"event": type(event).__name__, **dataclasses.asdict(event)}

    def results(message: Any) -> dict[str, Any]:
        return {"event": "MergeResult", **codec.decode_merge_result(message.value())}

    def dead_letters(message: Any) -> dict[str, Any]:
        headers = {k: v.decode(errors="replace") for k, v in (message.headers() or [])}
        return {
            "event": "DeadLetter",
            "table": (message.key() or b"").decode(errors="replace"),
            "headers": headers,
            "bytes": len(message.value() or b""),
        }

    def advice(message: Any) -> dict[str, Any]:
        return {
            "event": "ProducerAdvice",
            **dataclasses.asdict(codec.decode_producer_advice(message.value())),
        }

    return {"segments": segments, "results": results, "dead-letter": dead_letters, "advice": advice}[which]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return value if isinstance(value, str | int | float | bool) else str(value)

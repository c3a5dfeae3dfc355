"""Reading a subscribed topic until it goes quiet: what the event tail and the results follower share."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError

log = logging.getLogger(__name__)


def messages(consumer: Consumer, idle_timeout: float | None, poll: float = 0.5) -> Iterator[Any]:
    """Each record the consumer receives, until none arrived for `idle_timeout` seconds (None:
    never). Errors the client reports are logged (a partition's end is not one) and skipped."""
    quiet_since = time.monotonic()
    while idle_timeout is None or time.monotonic() - quiet_since < idle_timeout:
        message = consumer.poll(poll)
        if message is None:
            continue
        quiet_since = time.monotonic()
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("%s: %s", message.topic(), error)
            continue
        yield message

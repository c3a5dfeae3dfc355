"""What librdkafka says went wrong, as one line: a `KafkaException` carries a `KafkaError`, whose
`str()` is the reason alone (its `repr` names the code and flags too)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException


def kafka_reason(exc: KafkaException) -> str:
    """The reason librdkafka gave, or the exception's text when it carries no `KafkaError`."""
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)

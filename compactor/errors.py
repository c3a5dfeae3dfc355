"""Every error the compactor raises derives from `CompactorError`.

Each leaf says what failed; its docstring says what the caller should do.
"""

from __future__ import annotations


class CompactorError(Exception):
    """Root of the compactor's errors; catch this to handle any of them."""


class DependencyResolutionError(CompactorError):
    """JVM jars could not be resolved: check Maven and network access to Maven Central."""


class BrokerStartError(CompactorError):
    """The local Kafka broker did not come up: read the broker log it names."""


class ConfigError(CompactorError):
    """The YAML config is invalid: fix the key the message names and reload."""


class EventDecodeError(CompactorError):
    """An event's bytes are not a valid event: route it to the dead-letter topic."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class InvalidSegmentError(CompactorError):
    """A segment (from an event or a file) is inconsistent: reject that record."""


class ManualMergeError(CompactorError):
    """A requested manual merge is invalid: nothing was changed; fix the ids named."""


class DeliveryError(CompactorError):
    """Kafka did not acknowledge a produced event: the batch must be retried."""


class TableNotFoundError(CompactorError):
    """No Delta table exists for the named table under the warehouse."""


class EventEncodeError(CompactorError):
    """A record does not fit its Avro schema: fix the field the message names."""


class UnsupportedTableFeature(CompactorError):
    """The Delta table uses a feature a merge cannot preserve: turn it off or leave the table out."""

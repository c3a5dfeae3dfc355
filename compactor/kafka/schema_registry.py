"""A Confluent-compatible schema registry, through confluent-kafka's client, for the wire format."""

from __future__ import annotations

from collections.abc import Mapping

from compactor.errors import ServiceUnreachable

# client settings it takes as numbers only (the config hands every setting over as text)
NUMERIC = frozenset(
    {
        "timeout",
        "cache.capacity",
        "cache.latest.ttl.sec",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
    }
)


class ConfluentRegistry:
    """Registers our schemas (subject: the record's full name) and fetches writers by id.

    `conf` is the client's configuration: `url`, and `basic.auth.user.info`, `ssl.ca.location`
    and the like; a `mock://` url gives confluent-kafka's in-memory registry (for tests)."""

    def __init__(self, conf: Mapping[str, str]) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.url = conf.get("url", "")
        typed = {k: float(v) if k in NUMERIC else v for k, v in conf.items()}
        self.client = SchemaRegistryClient.new_client(typed)

    def register(self, subject: str, schema_json: str) -> int:
        from confluent_kafka.schema_registry import Schema

        try:
            return int(self.client.register_schema(subject, Schema(schema_json, "AVRO")))
        except Exception as exc:  # HTTP, TLS and registry errors come in many types
            raise ServiceUnreachable(
                f"schema registry {self.url}: registering {subject} failed ({exc})"
            ) from None

    def schema(self, schema_id: int) -> str | None:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return str(self.client.get_schema(schema_id).schema_str)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            raise ServiceUnreachable(f"schema registry {self.url}: schema id {schema_id}: {exc}") from None
        except Exception as exc:
            raise ServiceUnreachable(f"schema registry {self.url}: schema id {schema_id}: {exc}") from None

"""Avro single-object encoding or the Confluent wire format (fastavro): the bytes on our topics.

A single-object message is `C3 01` + the writer schema's 8-byte CRC-64-AVRO fingerprint +
the Avro binary body; a Confluent one is `00` + a schema registry's 4-byte id + the body.
Either way a reader knows which schema wrote it and can resolve older schema versions to
the current one. Schemas are loaded from the `.avsc`
files in `schemas/` (older versions under `schemas/history/`): they are the
single source. Any decoding problem raises `EventDecodeError` with a reason.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any, Protocol

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from compactor.errors import CompactorError, DeadLetterReason, EventDecodeError, EventEncodeError

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8
CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_LEN = len(CONFLUENT_MAGIC) + 4


def schemas_dir() -> Path:
    """$COMPACTOR_SCHEMAS_DIR, the copy inside an installed package, or the repo's `schemas/`."""
    configured = os.environ.get("COMPACTOR_SCHEMAS_DIR")
    if configured:
        return Path(configured)
    package = Path(__file__).parent.parent  # compactor/
    packaged = package / "schemas"  # a wheel carries them here (see pyproject.toml)
    return packaged if packaged.is_dir() else package.parent / "schemas"


class SchemaRegistry(Protocol):
    """What the Confluent wire format needs of a schema registry (confluent-kafka's client)."""

    def register(self, subject: str, schema_json: str) -> int: ...

    def schema(self, schema_id: int) -> str | None:
        """The schema's JSON, None when the registry has no such id."""


class SchemaSet:
    """The known schemas: encode with each event's current one; decode any known version.

    Messages are written in Avro single-object encoding, or with a `registry` in the Confluent
    wire format (`00` + the registry's 4-byte schema id + the body) that Kafka UI, kcat and Kafka
    Connect read. Either format is read, whichever is written, so a topic can change format.
    """

    def __init__(self, directory: Path | None = None, registry: SchemaRegistry | None = None) -> None:
        directory = directory or schemas_dir()
        self.registry = registry
        self.current: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, str] = {}  # each current schema's JSON, as registered
        self.writers: dict[bytes, dict[str, Any]] = {}
        self._ids: dict[str, int] = {}  # the registry's id of each current schema
        self._by_id: dict[int, dict[str, Any]] = {}  # writer schemas fetched from the registry
        files = sorted(directory.glob("*.avsc")) + sorted(directory.glob("history/*.avsc"))
        if not files:
            raise CompactorError(f"no Avro schemas (*.avsc) found in {directory}")
        for path in files:
            parsed = _record_schema(path.read_text(), str(path))
            self.writers[_fingerprint(parsed)] = parsed
            if path.parent == directory:
                self.current[parsed["name"]] = parsed
                self.sources[parsed["name"]] = json.dumps(json.loads(path.read_text()), separators=(",", ":"))

    def encode(self, name: str, record: dict[str, Any]) -> bytes:
        schema = self.current[name]
        buffer = io.BytesIO()
        buffer.write(self._header(name))
        try:
            fastavro.schemaless_writer(buffer, schema, record, strict_allow_default=True)
        except (ValueError, TypeError, KeyError) as exc:
            raise EventEncodeError(f"{name.rsplit('.', 1)[-1]}: {exc}") from None
        return buffer.getvalue()

    def _header(self, name: str) -> bytes:
        if self.registry is None:
            return MAGIC + _fingerprint(self.current[name])
        if name not in self._ids:  # subject: the record's full name (several event types share a topic)
            self._ids[name] = self.registry.register(name, self.sources[name])
        return CONFLUENT_MAGIC + self._ids[name].to_bytes(4, "big")

    def decode(self, name: str | None, data: bytes) -> dict[str, Any]:
        """Decode `data`; with `name`, refuse any other event type."""
        return self.decode_any(name, data)[1]

    def decode_any(self, name: str | None, data: bytes) -> tuple[str, dict[str, Any]]:
        writer, offset = self._writer(data)
        if writer["name"] not in self.current:
            raise EventDecodeError(
                DeadLetterReason.UNKNOWN_SCHEMA, f"{writer['name']} is not an event we read"
            )
        if name is not None and writer["name"] != name:
            raise EventDecodeError(
                DeadLetterReason.WRONG_EVENT_TYPE, f"expected {name}, got {writer['name']}"
            )
        name = str(writer["name"])
        body = io.BytesIO(data[offset:])
        try:
            record = fastavro.schemaless_reader(body, writer, self.current[name])
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise EventDecodeError(
                DeadLetterReason.UNDECODABLE, f"Avro body does not match {name}: {exc!r}"
            ) from None
        if body.read(1):
            raise EventDecodeError(DeadLetterReason.UNDECODABLE, "trailing bytes after the Avro record")
        if not isinstance(record, dict):
            raise EventDecodeError(
                DeadLetterReason.UNDECODABLE, f"expected a record, got {type(record).__name__}"
            )
        return name, record

    def _writer(self, data: bytes) -> tuple[dict[str, Any], int]:
        """The schema that wrote `data`, and where its body starts."""
        if isinstance(data, bytes | bytearray) and len(data) >= HEADER_LEN and data[:2] == MAGIC:
            writer = self.writers.get(bytes(data[2:HEADER_LEN]))
            if writer is None:
                raise EventDecodeError(
                    DeadLetterReason.UNKNOWN_SCHEMA,
                    f"writer schema fingerprint {data[2:HEADER_LEN].hex()} is not known",
                )
            return writer, HEADER_LEN
        if (
            isinstance(data, bytes | bytearray)
            and len(data) >= CONFLUENT_HEADER_LEN
            and data[:1] == CONFLUENT_MAGIC
        ):
            return self._registered(int.from_bytes(data[1:CONFLUENT_HEADER_LEN], "big")), CONFLUENT_HEADER_LEN
        raise EventDecodeError(
            DeadLetterReason.UNDECODABLE,
            "neither Avro single-object encoding (C3 01 marker) nor the Confluent wire format (00 marker)",
        )

    def _registered(self, schema_id: int) -> dict[str, Any]:
        if schema_id in self._by_id:
            return self._by_id[schema_id]
        if self.registry is None:  # most likely not ours at all
            raise EventDecodeError(
                DeadLetterReason.UNDECODABLE,
                f"not Avro single-object encoding; if Confluent wire format (schema id {schema_id}), "
                "configure kafka.schema_registry to read it",
            )
        text = self.registry.schema(schema_id)  # an unreachable registry raises: the batch is retried
        if text is None:
            raise EventDecodeError(
                DeadLetterReason.UNKNOWN_SCHEMA, f"the registry has no schema id {schema_id}"
            )
        try:
            writer = _record_schema(text, f"schema id {schema_id}")
        except CompactorError as exc:
            raise EventDecodeError(DeadLetterReason.UNKNOWN_SCHEMA, str(exc)) from None
        self._by_id[schema_id] = writer
        return writer


def _record_schema(text: str, where: str) -> dict[str, Any]:
    try:
        parsed = fastavro.parse_schema(json.loads(text))
    except Exception as exc:  # JSON or Avro errors, by many types
        raise CompactorError(f"{where}: not an Avro schema ({exc})") from None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise CompactorError(f"{where}: an event schema must be an Avro record")
    return parsed


def _fingerprint(schema: dict[str, Any]) -> bytes:
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))

"""Avro single-object encoding (fastavro): the bytes on our topics, whatever the event.

Every message is `C3 01` + the writer schema's 8-byte CRC-64-AVRO fingerprint +
the Avro binary body, so a reader knows which schema wrote it and can resolve
older schema versions to the current one. Schemas are loaded from the `.avsc`
files in `schemas/` (older versions under `schemas/history/`): they are the
single source. Any decoding problem raises `EventDecodeError` with a reason.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from compactor.errors import CompactorError, DeadLetterReason, EventDecodeError, EventEncodeError

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8


def schemas_dir() -> Path:
    """$COMPACTOR_SCHEMAS_DIR, the copy inside an installed package, or the repo's `schemas/`."""
    configured = os.environ.get("COMPACTOR_SCHEMAS_DIR")
    if configured:
        return Path(configured)
    package = Path(__file__).parent.parent  # compactor/
    packaged = package / "schemas"  # a wheel carries them here (see pyproject.toml)
    return packaged if packaged.is_dir() else package.parent / "schemas"


class SchemaSet:
    """The known schemas: encode with each event's current one; decode any known version."""

    def __init__(self, directory: Path | None = None) -> None:
        directory = directory or schemas_dir()
        self.current: dict[str, dict[str, Any]] = {}
        self.writers: dict[bytes, dict[str, Any]] = {}
        files = sorted(directory.glob("*.avsc")) + sorted(directory.glob("history/*.avsc"))
        if not files:
            raise CompactorError(f"no Avro schemas (*.avsc) found in {directory}")
        for path in files:
            parsed = fastavro.parse_schema(json.loads(path.read_text()))
            if not isinstance(parsed, dict):
                raise CompactorError(f"{path}: an event schema must be an Avro record")
            key = bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
            self.writers[key] = parsed
            if path.parent == directory:
                self.current[parsed["name"]] = parsed

    def encode(self, name: str, record: dict[str, Any]) -> bytes:
        schema = self.current[name]
        key = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
        buffer = io.BytesIO()
        buffer.write(MAGIC + key)
        try:
            fastavro.schemaless_writer(buffer, schema, record, strict_allow_default=True)
        except (ValueError, TypeError, KeyError) as exc:
            raise EventEncodeError(f"{name.rsplit('.', 1)[-1]}: {exc}") from None
        return buffer.getvalue()

    def decode(self, name: str | None, data: bytes) -> dict[str, Any]:
        """Decode `data`; with `name`, refuse any other event type."""
        return self.decode_any(name, data)[1]

    def decode_any(self, name: str | None, data: bytes) -> tuple[str, dict[str, Any]]:
        if not isinstance(data, bytes | bytearray) or len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise EventDecodeError(
                DeadLetterReason.UNDECODABLE, "not an Avro single-object message (missing C3 01 marker)"
            )
        writer = self.writers.get(bytes(data[2:HEADER_LEN]))
        if writer is None:
            raise EventDecodeError(
                DeadLetterReason.UNKNOWN_SCHEMA,
                f"writer schema fingerprint {data[2:HEADER_LEN].hex()} is not known",
            )
        if name is not None and writer["name"] != name:
            raise EventDecodeError(
                DeadLetterReason.WRONG_EVENT_TYPE, f"expected {name}, got {writer['name']}"
            )
        name = str(writer["name"])
        body = io.BytesIO(data[HEADER_LEN:])
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

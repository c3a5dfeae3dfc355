"""Upsert key index snapshots on the warehouse, so that a restarted job takes its tables' key
indexes back instead of scanning each table whole.

`<warehouse>/_compactor/key-index/<table>/<version>.npz`: the bytes `KeyIndex.snapshot` made,
named by the table version the catalog had reached when it was taken. Each is written whole
in one step (`HadoopFiles.replace_chunks`: a local file renamed over, one object on an object
store, seen only once whole), then the older ones are deleted; a reader takes the newest.
A snapshot of ten million keys is hundreds of megabytes, beside an index of about as many in
the driver: it goes to and from the store in pieces of `HadoopFiles.chunk_bytes`, never as one
py4j message, and never whole in memory: it is spooled through a temporary file on the driver's
local disk (`tempfile`'s folder, `TMPDIR`) both ways, so that saving or taking one back costs
the driver a piece's memory beyond the index itself (issue 49).
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from compactor.delta.files import HadoopFiles
from compactor.delta.paths import state_uri
from compactor.delta.store import SnapshotWriter, StoredSnapshot
from compactor.domain.clock import now_utc

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{20})\.npz$")


class KeyIndexSnapshots:
    def __init__(self, files: HadoopFiles, warehouse: Path | str) -> None:
        self.files = files
        self.warehouse = warehouse

    def folder(self, table: str) -> str:
        return state_uri(self.warehouse, f"key-index/{table}")

    def save(self, table: str, version: int, write: SnapshotWriter, keys: int) -> None:
        """`write` the snapshot into a spool on local disk, then `save_chunks` of it."""
        with tempfile.TemporaryFile(prefix="key-index-") as spool:
            write(spool)
            spool.seek(0)
            self.save_chunks(table, version, self._pieces(spool), keys)

    def _pieces(self, spool: IO[bytes]) -> Iterable[bytes]:
        return iter(lambda: spool.read(self.files.chunk_bytes), b"")

    def save_chunks(
        self, table: str, version: int, chunks: Iterable[bytes | bytearray | memoryview], keys: int
    ) -> None:
        """Write the snapshot from its pieces, in order, and what status says of it
        (`<version>.json`: its keys, bytes and when it was written), then delete the table's
        older ones."""
        folder = self.folder(table)
        name = f"{version:020d}.npz"
        written = self.files.replace_chunks(f"{folder}/{name}", chunks)
        facts = {"version": version, "keys": keys, "bytes": written, "written_at": now_utc().isoformat()}
        self.files.write_text(f"{folder}/{version:020d}.json", json.dumps(facts))
        for older_version, older in self._versions(folder):
            if older != name:
                self.files.delete(f"{folder}/{older}")
                self.files.delete(f"{folder}/{older_version:020d}.json")

    def describe(self, table: str) -> dict[str, Any] | None:
        """What the table's newest snapshot holds (version, keys, bytes, written_at), without
        reading it; None when it has none."""
        found = self._versions(self.folder(table))
        if not found:
            return None
        version = max(found)[0]
        text = self.files.read_text(f"{self.folder(table)}/{version:020d}.json")
        return json.loads(text) if text else {"version": version}

    def load(self, table: str) -> StoredSnapshot | None:
        """The table's newest snapshot, None when it has none: read in pieces into a spool on
        local disk (`numpy.load` of an `.npz` needs a file it can seek in), which the caller
        reads and closes."""
        folder = self.folder(table)
        found = self._versions(folder)
        if not found:
            return None
        version, name = max(found)
        spool = tempfile.TemporaryFile(prefix="key-index-")  # noqa: SIM115 - the caller closes it
        try:
            with self.files.read_chunks(f"{folder}/{name}") as chunks:
                if chunks is None:  # deleted since listed: a newer one replaced it
                    spool.close()
                    return None
                for piece in chunks:
                    spool.write(piece)
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return StoredSnapshot(version, spool)

    def _versions(self, folder: str) -> list[tuple[int, str]]:
        found = []
        for name in self.files.list_names(folder):
            match = _NAME.match(name)
            if match:
                found.append((int(match[1]), name))
        return found

"""Which Delta versions' merges have been announced on Kafka, per table (a small state file).

Written after a plan's events are acknowledged; read at start-up to announce
commits that a crash left unannounced. Losing the file only repeats
announcements (consumers de-duplicate by plan id); it never loses one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class AnnouncedVersions:
    """Per table, the highest Delta version whose plan events were acknowledged."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.versions: dict[str, int] = {}
        if path is not None and path.exists():
            self.versions = {str(k): int(v) for k, v in json.loads(path.read_text()).items()}

    def get(self, table: str) -> int | None:
        return self.versions.get(table)

    def advance(self, table: str, version: int) -> None:
        if version <= self.versions.get(table, -2):
            return
        self.versions[table] = version
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.versions, sort_keys=True))
        os.replace(scratch, self.path)  # atomic: a crash leaves the old file or the new one

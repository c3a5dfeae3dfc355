"""The key index of every upsert table the job plans, brought up to the catalog before its
invalid-row counts are read: new loads are read alone, merges are followed, anything else
rebuilds the index from one scan (see `catalog.key_index`)."""

from __future__ import annotations

import logging

from compactor.catalog.key_index import KeyIndex
from compactor.config.layout import UpsertConfig
from compactor.stream.state import StreamState

log = logging.getLogger(__name__)


class KeyIndexes:
    def __init__(self, state: StreamState) -> None:
        self.state = state
        self._indexes: dict[str, KeyIndex] = {}
        self.rebuilds = 0  # scans of a whole table (the first use of each table counts one)

    def invalid_counts(self, table: str, upsert: UpsertConfig) -> dict[str, int]:
        """Invalid rows per segment of `table`, as of the catalog now."""
        catalog = self.state.catalog
        live = catalog.live(table)
        index = self._indexes.get(table)

        def retired_by(segment_id: str) -> str | None:
            record = catalog.retired_record(table, segment_id)
            return None if record is None else record.retired_by

        loads = None if index is None else index.follow(live, retired_by)
        if index is None or loads is None:
            if index is not None:
                log.info(
                    "table %s: its segments changed in a way the key index cannot follow; rebuilt", table
                )
            fresh, loads = KeyIndex(), sorted(live)
            fresh.absorb([live[sid] for sid in loads], self.state.store.key_rows(table, upsert, None))
            index = self._indexes[table] = fresh  # kept once read: a failed scan leaves no index
            self.rebuilds += 1
        elif loads:
            index.absorb([live[sid] for sid in loads], self.state.store.key_rows(table, upsert, loads))
        return index.invalid()

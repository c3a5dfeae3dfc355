"""The key index of every upsert table the job plans, brought up to the catalog before its
invalid-row counts are read: new loads are read alone, merges are followed, anything else
rebuilds the index from one scan (see `catalog.key_index`)."""

from __future__ import annotations

import logging

from compactor.catalog.key_index import KeyIndex
from compactor.catalog.view import CatalogView
from compactor.config.layout import UpsertConfig
from compactor.delta.store import TableStore

log = logging.getLogger(__name__)


class KeyIndexes:
    def __init__(self, catalog: CatalogView, store: TableStore) -> None:
        self.catalog = catalog
        self.store = store
        self._indexes: dict[str, KeyIndex] = {}
        self._noted_in: dict[str, object] = {}  # the catalog's table object each index noted in
        self._marks: dict[str, int] = {}  # ... and how far into its changes it has looked
        self.rebuilds = 0  # scans of a whole table (the first use of each table counts one)

    def invalid_counts(self, table: str, upsert: UpsertConfig) -> dict[str, int]:
        """Invalid rows per segment of `table`, as of the catalog now."""
        self.note(table, upsert)
        return self._indexes[table].invalid()

    def note(self, table: str, upsert: UpsertConfig) -> set[str]:
        """Bring the table's index up to the catalog, and note the counts that changed in the
        catalog's columns (`SegmentColumns.invalid`, which upsert compaction reads); the ids of
        the segments whose count may have changed."""
        catalog = self.catalog
        live = catalog.live(table)
        index = self._indexes.get(table)

        def retired_by(segment_id: str) -> str | None:
            record = catalog.retired_record(table, segment_id)
            return None if record is None else record.retired_by

        same = self._noted_in.get(table) is live and live.noted
        mark, changed = live.mark, live.changed_since(self._marks.get(table, 0)) if same else None
        loads = None if index is None else index.follow(live, retired_by, changed)
        if index is None or loads is None:
            if index is not None:
                log.info(
                    "table %s: its segments changed in a way the key index cannot follow; rebuilt", table
                )
            fresh, loads = KeyIndex(), sorted(live)
            fresh.absorb([live[sid] for sid in loads], self.store.key_rows(table, upsert, None))
            index = self._indexes[table] = fresh  # kept once read: a failed scan leaves no index
            self.rebuilds += 1
        elif loads:
            index.absorb([live[sid] for sid in loads], self.store.key_rows(table, upsert, loads))
        touched = index.take_touched()
        if same:
            live.note_invalid(touched)
        else:  # a new index, or a table the catalog holds anew: every count
            live.note_invalid(index.invalid(), whole=True)
            self._noted_in[table] = live
        self._marks[table] = mark
        return set(touched)

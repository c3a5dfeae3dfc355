"""What a job's key indexes ask Spark for: counted per call, for the e2e tests to say which rows
an upsert attempt read."""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from compactor.catalog.key_index import KeyColumns, KeyRow, KeyRows
from compactor.catalog.key_values import Ints
from compactor.config.layout import UpsertConfig
from compactor.stream.handler import BatchHandler


class KeyRead(NamedTuple):
    segment_ids: tuple[str, ...] | None  # the segments read whole (None: the table)
    keys: int  # for a read of some keys' rows: how many keys (0: a read of whole segments)
    rows: int  # the rows it brought back
    read_from: frozenset[str]  # the segments those rows came from


def _tally(read: list[KeyRow | KeyColumns]) -> tuple[int, frozenset[str]]:
    """The rows a read brought back, and the segments they came from."""
    rows = [row for item in read for row in (item.rows() if isinstance(item, KeyColumns) else [item])]
    return len(rows), frozenset(row.segment_id for row in rows)


class CountedReads:
    """Wraps the handler's store: each key read it makes lands in `calls`."""

    def __init__(self, handler: BatchHandler) -> None:
        self.calls: list[KeyRead] = []
        store = handler.planner.keys.store
        read, look_up = store.key_rows, store.key_rows_of_keys

        def key_rows(table: str, upsert: UpsertConfig, segment_ids: Collection[str] | None) -> KeyRows:
            rows = list(read(table, upsert, segment_ids))
            ids = None if segment_ids is None else tuple(sorted(segment_ids))
            self.calls.append(KeyRead(ids, 0, *_tally(rows)))
            return rows

        def key_rows_of_keys(
            table: str, upsert: UpsertConfig, keys: Ints, excluding: Collection[str]
        ) -> KeyRows:
            rows = list(look_up(table, upsert, keys, excluding))
            self.calls.append(KeyRead((), len(keys), *_tally(rows)))
            return rows

        store.key_rows = key_rows  # type: ignore[method-assign]
        store.key_rows_of_keys = key_rows_of_keys  # type: ignore[method-assign]

    @property
    def whole_segments(self) -> list[KeyRead]:
        return [call for call in self.calls if not call.keys]

    @property
    def lookups(self) -> list[KeyRead]:
        return [call for call in self.calls if call.keys]

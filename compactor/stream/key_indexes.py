"""The key index of every upsert table the job plans, brought up to the catalog before its
invalid-row counts are read: new loads are read alone, merges are followed, and a change it
cannot follow (another writer's) is read again where it happened: the segments it touched,
and the other rows of the keys they held (see `catalog.key_index`). A table with no index yet
is read whole, once.

Each index outlives the job as a snapshot on the warehouse (`TableStore.save_key_index`). A
table's first use takes its snapshot back and follows the catalog from there like any later
use: the segments loaded since are read alone, the merges since followed. A table with no
snapshot or an unreadable one is read whole, with one log line saying why; segments another
writer removed or rewrote since the snapshot are read again as above, and so is a merge since
that took a load the snapshot never held (the catalog's record of what each plan merged away
tells). Snapshots are taken between batches under the handler's lock (a copy of the columns
a load changes in place), then encoded and written by the caller outside it. An index that
changed is saved within `SAVE_AFTER_MERGE_S` of a merge it followed, and at least every
`SAVE_EVERY_S`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple, Protocol

from compactor.catalog.key_index import Followed, IndexSnapshot, KeyIndex, SnapshotUnreadable
from compactor.catalog.retired import RetiredSegment
from compactor.catalog.view import CatalogView
from compactor.config.layout import UpsertConfig
from compactor.delta.store import TableStore
from compactor.domain.certificate import Fingerprint, IndexedWinners

log = logging.getLogger(__name__)


class KeptRecords(Protocol):
    """The catalog store's records of segments merged away before this process (`CatalogStore`)."""

    def retired(self, table: str, segment_ids: Sequence[str]) -> Mapping[str, RetiredSegment]: ...

    def merged_by(self, table: str, plan_ids: Sequence[str]) -> Mapping[str, Collection[str]]: ...


class _NothingKept:
    def retired(self, table: str, segment_ids: Sequence[str]) -> Mapping[str, RetiredSegment]:
        return {}

    def merged_by(self, table: str, plan_ids: Sequence[str]) -> Mapping[str, Collection[str]]:
        return {}


NOTHING_KEPT: KeptRecords = _NothingKept()

SAVE_EVERY_S = 300.0  # an index that changed (loads only) is saved at most this long after
SAVE_AFTER_MERGE_S = 30.0  # ... and one that followed a merge, this long after
# a change the index cannot follow is read again where it happened, unless its keys are more
# than this share of the table's: then one read of the whole table costs no more
REREAD_AT_MOST = 0.5


class Snapshot(NamedTuple):
    """A snapshot to write: the table, the table version the catalog had reached, and the
    index as taken (encoded by the writer, outside the handler's lock)."""

    table: str
    version: int
    taken: IndexSnapshot


class IndexFacts(NamedTuple):
    """What `compactor status` and the metrics say of a table's key index."""

    keys: int
    memory_bytes: int  # the compact columns (0 for an index kept as the dict: see `KeyIndex`)
    snapshot_version: int | None  # the version of its latest snapshot, taken or restored
    snapshot_age_s: float | None  # seconds since that snapshot was written or restored


class KeyIndexes:
    def __init__(
        self,
        catalog: CatalogView,
        store: TableStore,
        kept: KeptRecords = NOTHING_KEPT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.kept = kept
        self.clock = clock
        self._indexes: dict[str, KeyIndex] = {}
        self._noted_in: dict[str, object] = {}  # the catalog's table object each index noted in
        self._marks: dict[str, int] = {}  # ... and how far into its changes it has looked
        self._changed_at: dict[str, float] = {}  # when each index first changed since its snapshot
        self._merged: set[str] = set()  # ... of those, the ones that followed a merge since
        self._saved: dict[str, tuple[int, float]] = {}  # its snapshot: (version, when)
        self.rebuilds = 0  # scans of a whole table (a first use with no snapshot to take counts one)
        self.rereads = 0  # changes it could not follow, read again segment by segment instead
        self.restored = 0  # snapshots taken back
        self._distrusted: set[str] = set()  # tables whose next index is read whole, not restored

    def invalid_counts(self, table: str, upsert: UpsertConfig) -> dict[str, int]:
        """Invalid rows per segment of `table`, as of the catalog now."""
        self.note(table, upsert)
        return self._indexes[table].invalid()

    def expected_winners(self, table: str, input_ids: Collection[str]) -> IndexedWinners | None:
        """What the table's index says `input_ids` win, with the table as it knows it (a merge's
        second opinion: `IndexedWinners`); None for a table without an index (no upsert
        compaction rule) or whose index is behind the catalog. The index is not brought up here:
        the planner does that at every attempt, and reads the segments it recounted then."""
        index = self._indexes.get(table)
        if index is None:
            return None
        found = index.winners_of(input_ids)
        live = self.catalog.live(table)
        if found is None or index.segment_ids != live.keys():
            return None
        return IndexedWinners(Fingerprint.of(*found), {sid: s.records for sid, s in live.items()})

    def distrust(self, table: str) -> None:
        """Drop the table's index, to be read whole at its next use (not taken back from its
        snapshot): a merge's winners check failed, and the index may be what was wrong (its row
        hashes, unlike its counts, are not checked as it follows merges). A sound index refuses a
        broken merge again; a stale one costs one refused attempt, not a quarantine."""
        if self._indexes.pop(table, None) is not None:
            self._distrusted.add(table)

    def note(self, table: str, upsert: UpsertConfig) -> set[str]:
        """Bring the table's index up to the catalog, and note the counts that changed in the
        catalog's columns (`SegmentColumns.invalid`, which upsert compaction reads); the ids of
        the segments whose count may have changed."""
        catalog = self.catalog
        live = catalog.live(table)
        index = self._indexes.get(table)
        restored = (
            index is None and table not in self._distrusted and (index := self._restore(table)) is not None
        )

        merged_since = {}  # a restored index's segments merged since its snapshot, maybe before this process
        if restored and index is not None:
            merged_since = dict(self.kept.retired(table, sorted(index.segment_ids - live.keys())))

        def retired_by(segment_id: str) -> str | None:
            record = catalog.retired_record(table, segment_id) or merged_since.get(segment_id)
            if record is None and restored:  # merged away again since: one lookup each
                record = self.kept.retired(table, [segment_id]).get(segment_id)
            return None if record is None else record.retired_by

        def merged_by(plan_ids: Sequence[str]) -> dict[str, set[str]]:
            """What each plan merged away, by this process or before it."""
            found: dict[str, set[str]] = {plan: set() for plan in plan_ids}
            for record in catalog.retired_records(table):
                if record.retired_by in found:
                    found[record.retired_by].add(record.segment_id)
            for plan, ids in self.kept.merged_by(table, plan_ids).items():
                found.setdefault(plan, set()).update(ids)
            return found

        same = not restored and self._noted_in.get(table) is live and live.noted
        mark, changed = live.mark, live.changed_since(self._marks.get(table, 0)) if same else None
        followed = None if index is None else index.follow(live, retired_by, changed, merged_by)
        if followed is not None and followed.unfollowed and index is not None:
            whole = len(followed.orphans) > REREAD_AT_MOST * (len(index) + len(followed.orphans))
            self._say_unfollowed(table, restored, followed, whole)
            followed = None if whole else followed
        if index is None or followed is None:
            fresh, loads = KeyIndex(), sorted(live)
            fresh.absorb([live[sid] for sid in loads], self.store.key_rows(table, upsert, None))
            index = self._indexes[table] = fresh  # kept once read: a failed scan leaves no index
            self._saved.pop(table, None)  # the snapshot no longer says what the index holds
            self._changed_at.setdefault(table, self.clock())
            self.rebuilds += 1
            self._distrusted.discard(table)
        else:
            loads = followed.loads
            try:
                if loads:
                    index.absorb([live[sid] for sid in loads], self.store.key_rows(table, upsert, loads))
                if len(followed.orphans):
                    index.retake(self.store.key_rows_of_keys(table, upsert, followed.orphans, loads))
            except BaseException:  # half read: the next use starts over, from the snapshot or whole
                self._indexes.pop(table, None)
                raise
            self._indexes[table] = index
            self.rereads += bool(followed.unfollowed)
        touched = index.take_touched()
        if touched:
            self._changed_at.setdefault(table, self.clock())
            if set(touched) - set(loads):  # a merge's (or refresh's) output was followed
                self._merged.add(table)
        if same:
            live.note_invalid(touched)
        else:  # a new index, or a table the catalog holds anew: every count
            live.note_invalid(index.invalid(), whole=True)
            self._noted_in[table] = live
        self._marks[table] = mark
        return set(touched)

    def _say_unfollowed(self, table: str, restored: bool, followed: Followed, whole: bool) -> None:
        shown = ", ".join(followed.unfollowed[:5]) + (", ..." if len(followed.unfollowed) > 5 else "")
        what = (
            f"its key index snapshot of version {self._saved[table][0]} cannot be followed past"
            if restored
            else "the key index cannot follow"
        )
        then = (
            "most of the table's keys: reading the whole table"
            if whole
            else "reading them and the other rows of those keys"
        )
        log.warning(
            "table %s: %s %d segment(s) another writer removed or changed, or merged with loads "
            "it never read (%s); they held %d keys, %s",
            table,
            what,
            len(followed.unfollowed),
            shown,
            len(followed.orphans),
            then,
        )

    def _restore(self, table: str) -> KeyIndex | None:
        """The table's index from its snapshot; None (said why) when there is none to take."""
        try:
            stored = self.store.load_key_index(table)
        except Exception as exc:  # the warehouse out of reach: the table is read whole instead
            log.warning(
                "table %s: its key index snapshot could not be read (%s); reading the whole table", table, exc
            )
            return None
        if stored is None:
            log.info("table %s: no key index snapshot yet; reading the whole table", table)
            return None
        try:
            with stored.data:
                index = KeyIndex.restored(stored.data)
        except SnapshotUnreadable as exc:
            log.warning(
                "table %s: its key index snapshot of version %d is unreadable (%s); reading the whole table",
                table,
                stored.version,
                exc,
            )
            return None
        self._saved[table] = (stored.version, self.clock())
        self.restored += 1
        log.info(
            "table %s: key index of %d keys taken back from its snapshot of version %d",
            table,
            len(index),
            stored.version,
        )
        return index

    def snapshots_due(self, force: bool = False) -> list[Snapshot]:
        """The snapshots to write now (`force`: every index that changed, as the job stops).
        Called under the handler's lock; the caller writes them outside it, then `saved`."""
        now, due = self.clock(), []
        for table, since in list(self._changed_at.items()):
            wait = SAVE_AFTER_MERGE_S if table in self._merged else SAVE_EVERY_S
            if not force and now - since < wait and table in self._saved:
                continue
            version, taken = self.catalog.version(table), self._indexes[table].snapshot()
            del self._changed_at[table]
            self._merged.discard(table)
            if version is None or taken is None:
                continue  # nothing the catalog can date, or an index kept as the dict
            due.append(Snapshot(table, version, taken))
        return due

    def saved(self, snapshot: Snapshot) -> None:
        """`snapshot` is written: what status reports."""
        self._saved[snapshot.table] = (snapshot.version, self.clock())

    def unsaved(self, snapshot: Snapshot) -> None:
        """Writing `snapshot` failed: the table's index is due again."""
        self._changed_at.setdefault(snapshot.table, self.clock())

    def facts(self, table: str) -> IndexFacts | None:
        """The table's index as status reports it (None: the job has not built it)."""
        index = self._indexes.get(table)
        if index is None:
            return None
        saved = self._saved.get(table)
        return IndexFacts(
            len(index),
            index.nbytes,
            saved[0] if saved else None,
            self.clock() - saved[1] if saved else None,
        )

    def all_facts(self) -> dict[str, IndexFacts]:
        """Every index's facts (read by the metrics' thread: a snapshot of the dict first)."""
        return {table: facts for table in list(self._indexes) if (facts := self.facts(table)) is not None}

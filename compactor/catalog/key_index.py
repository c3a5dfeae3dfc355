"""An upsert table's winning row per primary key, kept current as loads arrive and merges replace
segments, so a segment's invalid-row count never needs a scan of the whole table.

A key's winner is its row with the highest comparison value; ties go to the later
load, then to the higher row hash (the order `delta.upsert` ranks by). A segment's
invalid rows are its rows minus the keys it wins. The index holds, per key hash,
the winner's comparison value, row hash and holder: the segment that holds it.

- A new load's rows are compared with each key's winner (`absorb`): the cost is the load's rows.
- A merge or refresh keeps every row that was valid in its inputs, so the keys its inputs won
  are won by its output: the inputs' holders are pointed at the output's, at the cost of the
  inputs' count, not of their keys (`follow`).
- Anything else (a segment gone without a plan of ours, a segment whose row count changed, a
  merge output holding loads a restored index never read, a merge or refresh output holding
  fewer or more rows than its plan can have written: another writer changed it, or its inputs,
  before the index looked) cannot be followed. Only what it touched is read again: the index
  drops the winners those segments held and returns their keys (`Followed`); the caller reads
  the changed segments whole (`absorb`), and, from the rest of the table, the rows of just
  those keys (`retake`). A key whose winner lay elsewhere lost no row it could win with, so
  every other winner stands.

Keys are 64-bit hashes (Spark's xxhash64 of the key columns). Two keys sharing a hash
(about one pair in 10^7 tables of a million keys) count as one key, which moves one
row between two counts; the counts only choose what to compact, and a merge judges
every row again, so no row is ever dropped on a count's word. A restart takes the index back
from its snapshot (`snapshot`, `restored`) and follows the catalog from there.

How the winners are kept: numpy columns of 28 bytes a key, chosen by measurement
(`bench/upsert_scale.py`, 2 CPUs, AMD EPYC). The dict this replaces (key hash -> a tuple of
presence, value, row hash and holder) grew the driver by 245 bytes a key at 1M keys; the
columns (a 64-bit key hash, the comparison value coded as an order-preserving int64, a 64-bit
row hash and a 32-bit holder id) grow it by 28.6 at 10M keys, and a load of 100k keys into
10M keys takes 1.14 times what it takes into 1M (about 0.1 s; most of it reading the rows'
Python objects). An embedded store spilling to local disk (RocksDB) was not needed to meet
40 bytes a key, and would put a native store and its files beside every job.
- Rows come as `KeyRow`s or, from a Spark read, as `KeyColumns`: numpy columns with the values
  already coded from Arrow (`delta.key_columns`), so no Python object is made per row; a
  whole-table read of 10M keys took 11.5 s so, against 26.0 s as `KeyRow`s.
- Holders (one per segment the index read; merges chain them as before) get small integer
  ids in the order they were read; a key holds its holder's id. A holder's load time is
  its root's, looked up per distinct holder a load meets, never stored per key. Holders of
  segments no longer live (merged away: their keys resolve to the output's holder; or dropped
  with a change the index could not follow: they hold no key) are dropped once they outnumber
  the live ones and `_DEAD_HOLDERS`: every key's id is renumbered to its live holder's, a pass
  over the keys once per that many loads at least. A snapshot never carries them.
- Comparison values are encoded so that integer order is the order the dict compared in
  (`encode_values`): ints and bools as themselves; floats by their bits with the magnitude
  of negatives flipped (-0.0 counts as 0.0, as Python's == says; NaN above +inf and equal to
  itself, as Spark ranks it: Python's comparisons with NaN gave order-dependent answers);
  datetimes as microseconds since the epoch (aware and naive apart: they do not compare);
  dates as days. None ("absent", below every value) is INT64_MIN, which no encoded value
  takes. Any other column (strings, decimals, ints beyond 64 bits, one column of two kinds)
  turns the index, once and for all, into the dict it was (`_winners`), behind the same
  methods: exact, and 250 bytes a key.
- A load's rows are grouped per key in one sort (the later row wins only when it ranks
  strictly higher, so the first of equal rows stays, as row by row); each group's best is
  compared with its key's winner, kept in sorted runs (`catalog.key_runs`). A load costs its
  own rows times a log factor, never a copy of the index.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import numpy.typing as npt

from compactor.catalog.key_runs import KeyRuns, Run
from compactor.catalog.key_values import ABSENT, Ints, decode_values, encode_values, micros, only_ints
from compactor.domain.layout import refresh_output_prefix
from compactor.domain.plans import output_id
from compactor.domain.segments import Segment, SegmentState
from compactor.errors import CompactorError

_CHUNK = 1 << 20  # rows taken in at a time: bounds what one step of `absorb` allocates
# Holders of segments no longer live that an index keeps before it drops them: they go once
# there are more of them than this and than live ones (a pass over the keys, about 60 ms at
# 10M keys), so an index holds at most twice its live segments' holders and this many more.
_DEAD_HOLDERS = 1024
_NO_KEYS: Ints = np.empty(0, np.int64)


class KeyRow(NamedTuple):
    """One row as the index reads it: its key's hash, comparison value, row hash and segment."""

    key: int
    value: Any  # the comparison column's value (None sorts below every value)
    row_hash: int
    segment_id: str


class KeyColumns(NamedTuple):
    """Rows as columns, as a Spark read through Arrow gives them, for `absorb` to take without a
    Python object per row: key hashes, comparison values coded (`key_values.encode_values`) and
    their kind, row hashes, and each row's segment as its place in `segment_ids`."""

    keys: Ints
    kind: str | None
    values: Ints
    row_hashes: Ints
    segments: Ints
    segment_ids: list[str]

    def rows(self) -> list[KeyRow]:
        """The same rows, one object each (for the dict: see the module)."""
        ids = [self.segment_ids[at] for at in self.segments.tolist()]
        values = decode_values(self.kind, self.values)
        return list(map(KeyRow, self.keys.tolist(), values, self.row_hashes.tolist(), ids))


KeyRows = Iterable[KeyRow | KeyColumns]  # what a read of key rows gives: rows, or rows as columns


class Followed(NamedTuple):
    """What `KeyIndex.follow` leaves to read."""

    loads: list[str]  # segments to read whole (`absorb`): new loads, and segments it could not follow
    orphans: Ints  # keys whose winners went with those segments: their rows elsewhere (`retake`)
    unfollowed: list[str]  # the segments it could not follow (gone, or changed in place)


class _Holder:
    """A segment's share of winners; once merged away, it points at the segment that replaced it."""

    __slots__ = ("loaded", "number", "parent", "segment_id", "wins")

    def __init__(self, segment_id: str, loaded: datetime | None) -> None:
        self.segment_id = segment_id
        self.loaded = loaded
        self.wins = 0
        self.parent: _Holder | None = None
        self.number = -1  # its place in `KeyIndex._read` (the id keys hold), once it has one

    def root(self) -> _Holder:
        top = self
        while top.parent is not None:
            top = top.parent
        node = self
        while node.parent is not None and node.parent is not top:  # shorten the path for next time
            node.parent, node = top, node.parent
        return top


SNAPSHOT_FORMAT = 1


class IndexSnapshot:
    """A key index's columns and facts as `KeyIndex.snapshot` took them."""

    def __init__(self, columns: dict[str, Any], keys: int) -> None:
        self.columns = columns
        self.keys = keys

    def write(self, out: BinaryIO) -> None:
        """numpy's npz into `out`: a zip whose members carry a CRC, so that a damaged file is
        found when read. Each column goes in pieces of numpy's buffer (16 MiB), so writing to a
        file costs no second copy of the index."""
        np.savez(out, **self.columns)

    def encode(self) -> bytes:
        """`write` into memory (tests, and small indexes)."""
        out = io.BytesIO()
        self.write(out)
        return out.getvalue()


class SnapshotUnreadable(CompactorError):
    """A key index snapshot that cannot be taken back (damaged, or another format)."""


class KeyIndex:
    """One table's winners; see the module."""

    def __init__(self) -> None:
        self._runs = KeyRuns()  # the winners, compact (see `catalog.key_runs`)
        self._kind: str | None = None  # what the comparison values are (None: none seen yet)
        self._winners: dict[int, tuple[bool, Any, int, _Holder]] | None = None  # the dict, once needed
        # the holders keys name, by id (keys hold the id): every one read since dead ones were dropped
        self._read: list[_Holder] = []
        self._holders: dict[str, _Holder] = {}  # live segments the index has read or followed
        self._shapes: dict[str, _Shape] = {}  # what they held when the index took them in
        self._touched: set[str] = set()  # segments whose count may have changed since `take_touched`
        self._restored = False  # taken back from a snapshot and not yet followed

    def __len__(self) -> int:
        return len(self._winners) if self._winners is not None else len(self._runs)

    @property
    def segment_ids(self) -> frozenset[str]:
        """The segments whose rows the index holds (live when it last looked)."""
        return frozenset(self._holders)

    @property
    def compact(self) -> bool:
        """Whether the winners are kept as numpy columns (False: the dict; see the module)."""
        return self._winners is None

    @property
    def nbytes(self) -> int:
        """The bytes of the compact columns (0 once the index is the dict)."""
        return self._runs.nbytes

    def snapshot(self) -> IndexSnapshot | None:
        """The index as it is now, for `IndexSnapshot.encode` to make the bytes `restored` takes
        back; None for an index kept as the dict, whose values numpy cannot hold. Taking it
        copies the columns a load may change in place (a memory copy: cheap under a lock); the
        encoding is left to the caller. The runs go as they are, each key's holder as its root:
        holders of segments no longer live are not kept."""
        if self._winners is not None:
            return None
        kept, remap = self._renumbered()
        places = {id(holder): at for at, holder in enumerate(kept)}
        live = {sid: places[id(holder.root())] for sid, holder in self._holders.items()}
        meta = {
            "format": SNAPSHOT_FORMAT,
            "kind": self._kind,
            "runs": len(self._runs.runs),
            "holders": [[h.segment_id, h.loaded.isoformat() if h.loaded else None, h.wins] for h in kept],
            "live": live,
            "shapes": {
                sid: [n, sorted(parts), [list(state) for state in states]]
                for sid, (n, parts, states) in self._shapes.items()
            },
        }
        columns: dict[str, Any] = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
        for number, run in enumerate(self._runs.runs):
            columns |= {
                f"keys{number}": run.keys,  # never written in place: a run's keys are replaced whole
                f"values{number}": run.values.copy(),
                f"rows{number}": run.rows.copy(),
                f"holders{number}": remap[run.holders],
            }
        return IndexSnapshot(columns, len(self))

    @classmethod
    def restored(cls, data: bytes | BinaryIO) -> KeyIndex:
        """The index a `snapshot` holds, from its bytes or a seekable file of them (read a
        column at a time); `SnapshotUnreadable` (saying why) when it is damaged or of another
        format."""
        try:
            with np.load(io.BytesIO(data) if isinstance(data, bytes) else data, allow_pickle=False) as found:
                meta = json.loads(found["meta"].tobytes())
                if meta.get("format") != SNAPSHOT_FORMAT:
                    raise SnapshotUnreadable(
                        f"snapshot format {meta.get('format')!r}; this job reads {SNAPSHOT_FORMAT}"
                    )
                runs = [
                    Run(*(found[f"{name}{n}"] for name in ("keys", "values", "rows", "holders")))
                    for n in range(meta["runs"])
                ]
        except SnapshotUnreadable:
            raise
        except Exception as exc:  # a torn or foreign file: zip, CRC, member or JSON errors alike
            raise SnapshotUnreadable(f"not a key index snapshot ({type(exc).__name__}: {exc})") from None
        index = cls()
        for sid, loaded, wins in meta["holders"]:
            holder = _Holder(sid, datetime.fromisoformat(loaded) if loaded else None)
            holder.wins = wins
            index._number(holder)
        for run in runs:
            if not len(run.keys) == len(run.values) == len(run.rows) == len(run.holders):
                raise SnapshotUnreadable("a run's columns differ in length")
            if len(run) and not 0 <= int(run.holders.min()) <= int(run.holders.max()) < len(index._read):
                raise SnapshotUnreadable("a key names a holder the snapshot does not list")
        index._runs = KeyRuns(runs)
        index._holders = {sid: index._read[at] for sid, at in meta["live"].items()}
        index._shapes = {
            sid: (n, frozenset(parts), tuple((value, SegmentState(state)) for value, state in states))
            for sid, (n, parts, states) in meta["shapes"].items()
        }
        index._kind = meta["kind"]
        index._restored = True
        return index

    def follow(
        self,
        live: Mapping[str, Segment],
        retired_by: Callable[[str], str | None],
        changed: Iterable[str] | None = None,
        merged_by: Callable[[Sequence[str]], Mapping[str, Collection[str]]] | None = None,
    ) -> Followed:
        """Move to the table's live segments; return what the caller must read to catch up (see
        `Followed`). `changed`: the ids set or removed since the last call, when the caller knows
        (None: compare all). `merged_by`: the ids each plan merged away, asked only of an index
        restored from its snapshot and not yet followed (None: none known)."""
        if changed is None:
            looked, new = self._shapes.keys() & live.keys(), live.keys() - self._holders.keys()
            gone = list(self._holders.keys() - live.keys())
        else:
            ids = set(changed)
            looked = {sid for sid in ids if sid in live and sid in self._shapes}
            new = {sid for sid in ids if sid in live and sid not in self._holders}
            gone = [sid for sid in ids if sid in self._holders and sid not in live]
        # rows deleted or rewritten in place: a key's winner may have gone with them
        doubtful = [self._holders[sid] for sid in sorted(looked) if _shape(live[sid]) != self._shapes[sid]]
        made = _outputs_by_plan(new)
        targets: dict[str, _Holder] = {}
        plans: dict[str, str] = {}  # each output followed to, and the plan that made it
        rows_in: dict[str, int | None] = {}  # ... and its inputs' rows as taken in (None: not known)
        while gone:
            sid = gone.pop()
            plan = retired_by(sid)
            out = None if plan is None else _output_of(plan, made)
            if plan is None or out is None:
                # removed by another writer, or split: nothing says where its keys went
                doubtful.append(self._holders[sid])
                continue
            holder, target = self._holders.pop(sid), self._holders.get(out) or targets.get(out)
            if target is None:
                target = targets[out] = _Holder(out, None)
                plans[out] = plan
                if out not in live:
                    self._holders[out] = target  # merged away again since: follow it further
                    gone.append(out)
            holder.parent, target.wins = target, target.wins + holder.wins
            holder.wins = 0
            shape, had = self._shapes.pop(sid, None), rows_in.get(out, 0)
            rows_in[out] = None if shape is None or had is None else had + shape[0]
        # a merge judged its rows against every load it read: with loads new to the index here, it
        # may rightly hold fewer rows than the winners its inputs held (those loads win the rest)
        # (after a restart such loads are read again with the merges: `_unread_in`)
        unread = not self._restored and any(sid not in targets for sid in new)
        for out, target in targets.items():
            if out in live:
                target.loaded = live[out].loaded_at
                self._holders[out], self._shapes[out] = target, _shape(live[out])
                self._touched.add(out)
                if not _as_written(live[out], 0 if unread else target.wins, rows_in.get(out)):
                    doubtful.append(target)  # changed since its plan wrote it: its winners may be gone
        if self._restored:  # merges since the snapshot may have taken loads it never read
            self._restored = False
            doubtful += self._unread_in(targets, plans, merged_by or (lambda plan_ids: {}))
        orphans = self._forget(doubtful)
        unfollowed = sorted({holder.segment_id for holder in doubtful})
        loads = (new | {sid for sid in unfollowed if sid in live}) - self._holders.keys()
        return Followed(sorted(loads), orphans, unfollowed)

    def _unread_in(
        self,
        targets: Mapping[str, _Holder],
        plans: Mapping[str, str],
        merged_by: Callable[[Sequence[str]], Mapping[str, Collection[str]]],
    ) -> list[_Holder]:
        """The outputs followed that hold rows the index never read: a plan on their way merged
        a segment the snapshot did not hold (a load after it), or is not on record."""
        read = {holder.segment_id for holder in self._read} | targets.keys()
        inputs = merged_by(sorted(set(plans.values()))) if plans else {}
        unread = {
            id(root): root
            for out, plan in plans.items()
            if not (merged := inputs.get(plan)) or not set(merged) <= read
            for root in [targets[out].root()]
        }
        return list(unread.values())

    def _forget(self, doubtful: list[_Holder]) -> Ints:
        """Drop the segments `doubtful` and the winners they hold; their keys."""
        if not doubtful:
            return _NO_KEYS
        dropped = {id(holder) for holder in doubtful}
        for holder in doubtful:
            holder.wins = 0
            if self._holders.get(holder.segment_id) is holder:
                del self._holders[holder.segment_id]
                self._shapes.pop(holder.segment_id, None)
        if self._winners is not None:
            keys = [key for key, (*_, held) in self._winners.items() if id(held.root()) in dropped]
            for key in keys:
                del self._winners[key]
            return np.array(keys, np.int64)
        return self._runs.drop(
            np.fromiter((id(h.root()) in dropped for h in self._read), bool, len(self._read))
        )

    def absorb(self, loads: Iterable[Segment], rows: KeyRows) -> None:
        """Take in new segments and their rows (each row is compared with its key's winner)."""
        if self._too_many_dead():
            self._drop_dead()
        ids: dict[str, int] = {}
        for segment in loads:
            holder = self._holders[segment.id] = _Holder(segment.id, segment.loaded_at)
            ids[segment.id] = self._number(holder)
            self._shapes[segment.id] = _shape(segment)
            self._touched.add(segment.id)
        self._take_rows(ids, rows)

    def retake(self, rows: KeyRows) -> None:
        """Take in rows of segments the index holds: the rows of `Followed.orphans` outside the
        segments `follow` left to read whole."""
        self._take_rows({sid: self._number(holder) for sid, holder in self._holders.items()}, rows)

    def _number(self, holder: _Holder) -> int:
        if holder.number < 0:
            holder.number = len(self._read)
            self._read.append(holder)
        return holder.number

    def _renumbered(self) -> tuple[list[_Holder], npt.NDArray[np.int32]]:
        """The holders worth keeping, the live segments' first (in `_holders`' order), then any
        other a key still names (through the merges since it was read); and the new id of each
        holder id keys hold now (-1: named by no key)."""
        places: dict[int, int] = {}  # id(root) -> its place in `kept`
        kept: list[_Holder] = []

        def place(holder: _Holder) -> int:
            root = holder.root()
            if id(root) not in places:
                places[id(root)] = len(kept)
                kept.append(root)
            return places[id(root)]

        for holder in self._holders.values():
            place(holder)
        named = np.zeros(len(self._read), bool)
        for run in self._runs.runs:
            named[run.holders] = True
        remap = np.full(max(len(self._read), 1), -1, np.int32)
        for number in np.flatnonzero(named).tolist():
            remap[number] = place(self._read[number])
        return kept, remap

    def _too_many_dead(self) -> bool:
        """Do holders of segments no longer live outnumber the live ones and `_DEAD_HOLDERS`?"""
        dead = len(self._read) - len(self._holders)
        return dead > max(len(self._holders), _DEAD_HOLDERS)

    def _drop_dead(self) -> None:
        """Keep only the holders of live segments and those a key still names (each key's id
        becomes its root's): what merges left behind and what `_forget` dropped go."""
        if self._winners is not None:  # the dict holds holders, not ids: point each key at its root
            for key, (present, value, row_hash, held) in self._winners.items():
                if held.parent is not None:
                    self._winners[key] = (present, value, row_hash, held.root())
            named = {id(held): held for *_, held in self._winners.values()}
            kept = list({id(h): h for h in [*self._holders.values(), *named.values()]}.values())
        else:
            kept, remap = self._renumbered()
            for run in self._runs.runs:
                run.holders = remap[run.holders]
        for holder in self._read:
            holder.number = -1
        self._read = []
        for holder in kept:
            self._number(holder)

    def _take_rows(self, ids: Mapping[str, int], rows: KeyRows) -> None:
        holders = None
        for part in _parts(rows):
            if self._winners is None:
                batch = self._columns(part, ids) if isinstance(part, KeyColumns) else self._batch(part, ids)
                if batch is not None:
                    self._take(*batch)
                    continue
                self._to_dict()  # a value (or key) the columns cannot hold: the dict from here on
            holders = holders or {sid: self._read[i] for sid, i in ids.items()}
            self._absorb_dict(holders, part.rows() if isinstance(part, KeyColumns) else part)

    def _batch(self, chunk: list[KeyRow], ids: Mapping[str, int]) -> tuple[Ints, ...] | None:
        """Rows of the new loads as columns: key, encoded value, row hash, holder id, load time;
        None when they do not fit the columns (the chunk's rows are then left untaken)."""
        holders = np.fromiter((ids.get(row[3], -1) for row in chunk), np.int64, len(chunk))
        if not (held := holders >= 0).all():  # rows of segments the catalog does not know (yet)
            chunk = [row for row, kept in zip(chunk, held.tolist(), strict=True) if kept]
            holders = holders[held]
        if not chunk:
            return (np.empty(0, np.int64),) * 5
        keys, values, hashes, _ = zip(*chunk, strict=True)
        if not (only_ints(keys) and only_ints(hashes)):
            return None
        encoded = encode_values(values)
        if encoded is None:
            return None
        kind, codes = encoded
        if not self._takes_kind(kind):
            return None
        try:
            key_column, hash_column = np.array(keys, np.int64), np.array(hashes, np.int64)
        except OverflowError:
            return None
        self._kind = self._kind or kind
        return key_column, codes, hash_column, holders, self._loaded(ids, holders)

    def _columns(self, columns: KeyColumns, ids: Mapping[str, int]) -> tuple[Ints, ...] | None:
        """`_batch` for rows that come as columns: no Python object per row."""
        if not self._takes_kind(columns.kind):
            return None
        holders = np.array([ids.get(sid, -1) for sid in columns.segment_ids] or [-1], np.int64)[
            columns.segments
        ]
        keys, values, hashes = columns.keys, columns.values, columns.row_hashes
        if not (held := holders >= 0).all():  # rows of segments the catalog does not know (yet)
            keys, values, hashes, holders = keys[held], values[held], hashes[held], holders[held]
        if not len(keys):
            return (np.empty(0, np.int64),) * 5
        self._kind = self._kind or columns.kind
        return keys, values, hashes, holders, self._loaded(ids, holders)

    def _takes_kind(self, kind: str | None) -> bool:
        """Whether values of `kind` compare with those the columns hold (None: no value yet)."""
        return kind is None or self._kind is None or kind == self._kind

    def _loaded(self, ids: Mapping[str, int], holders: Ints) -> Ints:
        """Each row's load time, by its holder id: live holders are their own roots."""
        first = min(ids.values())
        loaded = np.zeros(max(ids.values()) - first + 1, np.int64)
        for number in ids.values():
            loaded[number - first] = micros(self._read[number].loaded)
        return loaded[holders - first]

    def _take(self, keys: Ints, values: Ints, hashes: Ints, holders: Ints, loaded: Ints) -> None:
        """Compare a chunk's rows with their keys' winners, as `_absorb_dict` does row by row."""
        if not len(keys):
            return
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        if (ordered[1:] == ordered[:-1]).any():  # a key more than once: the first of its best rows
            order = np.lexsort((-np.arange(len(keys)), hashes, loaded, values, keys))
            ordered = keys[order]
            last = np.ones(len(keys), bool)
            last[:-1] = ordered[1:] != ordered[:-1]
            order = order[last]
        keys, values, hashes, holders, loaded = (
            keys[order], values[order], hashes[order], holders[order], loaded[order],
        )  # fmt: skip
        found = self._runs.find(keys)
        old = found.held
        won = ~old
        if old.any():
            held_values, held_hashes, held_by = self._runs.winners(found)
            distinct, which = np.unique(held_by, return_inverse=True)
            roots = [self._read[i].root() for i in distinct.tolist()]
            held_loaded = np.array([micros(root.loaded) for root in roots], np.int64)[which]
            value, when, row = values[old], loaded[old], hashes[old]
            better = (value > held_values) | (
                (value == held_values)
                & ((when > held_loaded) | ((when == held_loaded) & (row > held_hashes)))
            )
            for root, lost in zip(
                roots, np.bincount(which[better], minlength=len(roots)).tolist(), strict=True
            ):
                if lost:
                    root.wins -= lost
                    self._touched.add(root.segment_id)
            won[old] = better
            self._runs.overwrite(found, better, value, row, holders[old])
        first = int(holders.min())
        for number, gained in enumerate(np.bincount(holders[won] - first).tolist()):
            if gained:
                winner = self._read[first + number]
                winner.wins += gained
                self._touched.add(winner.segment_id)
        new = ~old
        self._runs.add(keys[new], values[new], hashes[new], holders[new])

    def _to_dict(self) -> None:
        """The winners as the dict (see the module): from now on every value is compared as is."""
        winners: dict[int, tuple[bool, Any, int, _Holder]] = {}
        for run in self._runs.runs:
            values = decode_values(self._kind, run.values)
            present = (run.values != ABSENT).tolist()
            for key, there, value, row, held in zip(
                run.keys.tolist(), present, values, run.rows.tolist(), run.holders.tolist(), strict=True
            ):
                winners[key] = (there, value, row, self._read[held])
        self._winners, self._runs = winners, KeyRuns()

    def _absorb_dict(self, holders: Mapping[str, _Holder], rows: Iterable[KeyRow]) -> None:
        winners = self._winners
        assert winners is not None
        for key, value, row_hash, segment_id in rows:
            holder = holders.get(segment_id)
            if holder is None:
                continue  # a segment the catalog does not know (yet): its event decides
            present = value is not None
            current = winners.get(key)
            if current is not None:
                held = current[3].root()
                if (present, value, holder.loaded, row_hash) <= (
                    current[0],
                    current[1],
                    held.loaded,
                    current[2],
                ):
                    continue
                held.wins -= 1
                self._touched.add(held.segment_id)
            winners[key] = (present, value, row_hash, holder)
            holder.wins += 1
            self._touched.add(holder.segment_id)

    def winners_of(self, segment_ids: Collection[str]) -> tuple[int, int] | None:
        """How many keys `segment_ids` win, and their winners' row hashes summed modulo 2^64:
        what a merge of those segments must keep, counted apart from the merge (a certificate's
        second opinion: `domain.certificate.Winners`). None when the index does not hold one of
        them. A pass over the keys (about 0.1 s at 10M keys as columns; the dict is slower)."""
        if not set(segment_ids) <= self._holders.keys():
            return None
        wanted = {id(self._holders[sid]) for sid in segment_ids}
        if self._winners is not None:
            rows = [row for _, _, row, held in self._winners.values() if id(held.root()) in wanted]
            return len(rows), sum(rows) & ((1 << 64) - 1)
        chosen = np.fromiter((id(h.root()) in wanted for h in self._read), bool, len(self._read))
        count, total = 0, np.uint64(0)
        for run in self._runs.runs:
            kept = chosen[run.holders]
            count += int(kept.sum())
            with np.errstate(over="ignore"):
                total += run.rows[kept].view(np.uint64).sum(dtype=np.uint64)
        return count, int(total)

    def invalid(self) -> dict[str, int]:
        """Invalid (superseded) rows per segment the index holds; segments without any left out."""
        counts = {sid: self._count(sid) for sid in self._holders}
        return {sid: n for sid, n in counts.items() if n > 0}

    def take_touched(self) -> dict[str, int]:
        """The invalid rows of each segment whose count may have changed since the last call."""
        touched = {sid: self._count(sid) for sid in self._touched if sid in self._holders}
        self._touched.clear()
        return touched

    def _count(self, segment_id: str) -> int:
        # never below 0 once followed (`_as_written`), but for a change no row count shows
        return max(self._shapes[segment_id][0] - self._holders[segment_id].wins, 0)


_Shape = tuple[int, frozenset[str], tuple[tuple[str, str], ...]]


def _shape(segment: Segment) -> _Shape:
    """What a segment holds as far as its rows go: a change means rows changed in place."""
    return segment.records, segment.sub_partitions, segment.sub_partition_states


def _as_written(output: Segment, wins: int, rows_in: int | None) -> bool:
    """Whether a plan's output, followed before the index ever looked at it, holds as many rows
    as the plan can have written: its shape is taken as the plan's from here on, so a change
    made to it since (or to its inputs since the index took them in) would never be seen. A
    refresh writes every row of its inputs (`rows_in`); a merge every row valid in them (the
    `wins` they held), and at most all of them. None: the inputs' rows are not known (a chain
    of plans since the index looked): only the winners bound it.

    Fewer rows than winners is also what a merge shows that judged its rows against a load the
    index has not read yet: when such loads are new here (a concurrent loader), the caller reads
    them and they win those keys, so `wins` is 0 and only the upper bound holds; a load taken
    before a restored snapshot's restart cannot be told from rows deleted since, so it is read
    again. A change that keeps a merge output's count within the bounds (a winner deleted from a
    merge that kept invalid rows, or rows deleted beside a concurrent load) shows in no count, and
    goes unseen."""
    if rows_in is not None and output.id.startswith(refresh_output_prefix("")):
        return output.records == rows_in
    return wins <= output.records <= (output.records if rows_in is None else rows_in)


def _outputs_by_plan(new: Iterable[str]) -> dict[str, list[str]]:
    """New segments by the prefix their plan gave their id (merges: the whole id)."""
    refreshed, merged = refresh_output_prefix(""), output_id("")
    made: dict[str, list[str]] = {}
    for sid in new:
        if sid.startswith(refreshed):  # the prefix and the first characters of the plan id
            made.setdefault(refresh_output_prefix(sid.removeprefix(refreshed)), []).append(sid)
        elif sid.startswith(merged):
            made.setdefault(sid, []).append(sid)
    return made


def _output_of(plan_id: str, made: Mapping[str, list[str]]) -> str | None:
    """The one live segment `plan_id` wrote; its would-be id when none is live (merged away
    again); None when it wrote several (a split: the keys' new holders are unknown)."""
    found = made.get(output_id(plan_id)) or made.get(refresh_output_prefix(plan_id)) or [output_id(plan_id)]
    return found[0] if len(found) == 1 else None


def _parts(rows: KeyRows) -> Iterator[list[KeyRow] | KeyColumns]:
    """Columns as they come, and rows in chunks of at most `_CHUNK`."""
    chunk: list[KeyRow] = []
    for item in rows:
        if isinstance(item, KeyColumns):
            if chunk:
                yield chunk
                chunk = []
            yield item
            continue
        chunk.append(item)
        if len(chunk) >= _CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk

"""A table's segments as columns: what the planners scan without touching a million objects.

Reading one attribute off a million `Segment` objects costs about 0.1 s in
Python; the planners need five or six of them per attempt. `TableSegments` (the
catalog's per-table map) therefore keeps each planner-relevant attribute in a
numpy array beside the objects, updated as segments come and go, and
`SegmentColumns` is a read-only view of those arrays, optionally narrowed to a
selection of rows. A view is also a `Sequence[Segment]`, so code that wants the
objects (explanations, the chosen plans' inputs) reads only the rows it needs.

A view shares its table's arrays: it is valid until the table next changes,
which is how the planners use it (one synchronous evaluation).
"""

from __future__ import annotations

from collections.abc import (
    Callable,
    Collection,
    ItemsView,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
    ValuesView,
)
from itertools import repeat
from operator import itemgetter
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from compactor.domain.newest_loads import NewestLoads
from compactor.domain.segments import Origin, Segment, SegmentState

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Array = npt.NDArray[Any]

# column name -> (dtype, how a segment's value is read); `group` and `settled` are derived
_READ: dict[str, tuple[type, Any]] = {
    "start": (np.float64, lambda s: s.range.start_ts),
    "end": (np.float64, lambda s: s.range.end_ts),
    "loaded": (np.float64, lambda s: s.loaded_at.timestamp()),
    "size": (np.int64, lambda s: s.bytes),
    "records": (np.int64, lambda s: s.records),
    "level": (np.int64, lambda s: s.level),
    "settled": (np.bool_, lambda s: s.state is SegmentState.ONLINE and not s.sub_partition_states),
    "as_loaded": (np.bool_, lambda s: s.origin is Origin.LOAD),  # not the output of a merge or refresh
}
# `invalid`: an upsert table's superseded rows per segment, which no `Segment` holds: the key
# index notes them in the catalog's table (`TableSegments.note_invalid`); 0 everywhere else
NOTED = "invalid"
_CHANGES_KEPT = 100_000  # changes a table remembers for `changed_since`
COLUMNS = (*_READ, "group", NOTED)
GroupKey = tuple[int, frozenset[str], frozenset[str]]


def group_key(segment: Segment) -> GroupKey:
    """What segments must share to merge under any rule: schema version and build
    (sub-partition values and indexes, as in Kylin's multi-level partitions)."""
    return segment.schema_version, segment.sub_partitions, segment.indexes


def _encode_column(name: str, segments: Sequence[Segment], codes: dict[GroupKey, int]) -> Array:
    """One column of `segments`; new group keys are numbered in `codes`."""
    if name == NOTED:
        return np.zeros(len(segments), np.int64)
    if name == "group":
        keys = map(group_key, segments)
        return np.fromiter((codes.setdefault(k, len(codes)) for k in keys), np.int64, len(segments))
    dtype, read = _READ[name]
    return np.fromiter(map(read, segments), dtype, len(segments))


def _encode(segments: Sequence[Segment], codes: dict[GroupKey, int]) -> dict[str, Array]:
    return {name: _encode_column(name, segments, codes) for name in COLUMNS}


class SegmentColumns(Sequence[Segment]):
    """Segments as columns (epoch seconds for times), in a fixed row order."""

    __slots__ = ("_base", "_newest", "_objects", "_row_of", "_rows", "_taken")

    def __init__(
        self,
        objects: Sequence[Segment],
        base: Mapping[str, Array],
        row_of: Mapping[str, int] | None = None,
        rows: Ints | None = None,
        newest: Callable[[int], list[str]] | None = None,
    ) -> None:
        self._objects = objects  # indexed by base row
        self._base = base
        self._row_of = row_of  # segment id -> base row, built on first need when not given
        self._rows = rows  # the base rows of this view, None for all of them
        self._taken: dict[str, Array] = {}
        self._newest = newest  # the table's kept load order (whole views of a `TableSegments`)

    @classmethod
    def of(cls, segments: Iterable[Segment]) -> SegmentColumns:
        """`segments` as columns: the view itself when it already is one."""
        if isinstance(segments, SegmentColumns):
            return segments
        objects = segments if isinstance(segments, Sequence) else list(segments)
        return cls(objects, _Encoded(objects))

    def column(self, name: str) -> Array:
        found = self._taken.get(name)
        if found is None:
            base = self._base[name]
            found = self._taken[name] = base if self._rows is None else base[self._rows]
        return found

    @property
    def start(self) -> Floats:
        return self.column("start")

    @property
    def end(self) -> Floats:
        return self.column("end")

    @property
    def loaded(self) -> Floats:
        return self.column("loaded")

    @property
    def size(self) -> Ints:
        return self.column("size")

    @property
    def records(self) -> Ints:
        return self.column("records")

    @property
    def level(self) -> Ints:
        return self.column("level")

    @property
    def invalid(self) -> Ints:
        """Superseded rows per segment of an upsert table, as the key index noted them."""
        return self.column(NOTED)

    @property
    def group(self) -> Ints:
        """Equal codes for equal (schema version, sub-partitions, indexes); codes are small."""
        return self.column("group")

    @property
    def settled(self) -> Bools:
        return self.column("settled")

    @property
    def as_loaded(self) -> Bools:
        return self.column("as_loaded")

    # -- as a sequence of segments ----------------------------------------------

    def __len__(self) -> int:
        return len(self._objects) if self._rows is None else len(self._rows)

    @overload
    def __getitem__(self, i: int) -> Segment: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Segment]: ...
    def __getitem__(self, i: int | slice) -> Segment | Sequence[Segment]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return self._objects[i if self._rows is None else int(self._rows[i])]

    def __iter__(self) -> Iterator[Segment]:
        if self._rows is None:
            return iter(self._objects)
        return map(self._objects.__getitem__, self._rows.tolist())

    def pick(self, positions: Iterable[int]) -> list[Segment]:
        """The segments at `positions` of this view."""
        return [self[int(i)] for i in positions]

    def newest(self, n: int) -> list[str]:
        """Ids of the `n` most recently loaded segments, oldest of them first (ties by id)."""
        if n <= 0:
            return []
        if self._rows is None and self._newest is not None:
            return self._newest(n)
        return [self[int(i)].id for i in order_by(self.loaded, self)[-n:]]

    # -- narrowing --------------------------------------------------------------

    def take(self, positions: Ints | Bools) -> SegmentColumns:
        """The view narrowed to `positions` (indices or a mask of this view), in their order."""
        rows = np.flatnonzero(positions) if positions.dtype == np.bool_ else positions
        if self._rows is not None:
            rows = self._rows[rows]
        return SegmentColumns(self._objects, self._base, self._row_of, rows.astype(np.int64, copy=False))

    def without(self, segment_ids: Collection[str]) -> SegmentColumns:
        """The view less the segments with these ids."""
        if not segment_ids:
            return self
        return self.take(~self.mask(segment_ids))

    def mask(self, segment_ids: Collection[str]) -> Bools:
        """True at the positions of this view holding one of these ids (few ids: a lookup each)."""
        row_of = self._rows_by_id()
        wanted = np.fromiter((row_of[i] for i in segment_ids if i in row_of), np.int64)
        base_rows = np.arange(len(self._objects)) if self._rows is None else self._rows
        return np.isin(base_rows, wanted)

    def positions(self, segment_ids: Collection[str]) -> Ints:
        """The positions in this view of the segments with these ids (few ids: a lookup each)."""
        if self._rows is not None:
            return np.flatnonzero(self.mask(segment_ids))
        row_of = self._rows_by_id()
        return np.fromiter((row_of[i] for i in segment_ids if i in row_of), np.int64)

    def values_for(self, by_id: Mapping[str, int]) -> Ints:
        """A per-segment integer column from a map by id (0 where absent)."""
        row_of = self._rows_by_id()
        try:  # itemgetter looks a million ids up in C, twice as fast as a generator
            found = itemgetter(*by_id)(row_of) if len(by_id) > 1 else tuple(map(row_of.__getitem__, by_id))
        except KeyError:  # some ids are not in the table
            found = tuple(map(row_of.get, by_id, repeat(-1)))
        rows = np.fromiter(found, np.int64, len(by_id))
        values = np.fromiter(by_id.values(), np.int64, len(by_id))
        full = np.zeros(len(self._objects), np.int64)
        known = rows >= 0
        full[rows[known]] = values[known]
        return full if self._rows is None else full[self._rows]

    def _rows_by_id(self) -> Mapping[str, int]:
        if self._row_of is None:
            self._row_of = {s.id: row for row, s in enumerate(self._objects)}
        return self._row_of


class _Encoded(Mapping[str, Array]):
    """Columns of a plain sequence of segments, each encoded when first read."""

    def __init__(self, objects: Sequence[Segment]) -> None:
        self._objects = objects
        self._columns: dict[str, Array] = {}
        self._codes: dict[GroupKey, int] = {}

    def __getitem__(self, name: str) -> Array:
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = _encode_column(name, self._objects, self._codes)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)


def order_by(primary: Floats, segments: SegmentColumns, secondary: Floats | None = None) -> Ints:
    """Positions sorted by (`primary`, `secondary`, segment id): numpy sorts by `primary`, then
    once more the positions that tie on it, by (their run, `secondary`, id)."""
    if np.all(primary[1:] > primary[:-1]):  # already in order without a tie: the common case
        return np.arange(len(primary))
    order = np.argsort(primary)  # ties are settled below, so any sort will do
    ordered = primary[order]
    same = ordered[1:] == ordered[:-1]
    if not same.any():
        return order
    tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same])  # positions in a run of ties
    run = np.cumsum(np.r_[True, ~same])[tied]  # which run each belongs to
    members = order[tied]
    ids = np.array([segments[i].id for i in members.tolist()])
    keys = (ids, run) if secondary is None else (ids, secondary[members], run)
    order[tied] = members[np.lexsort(keys)]  # runs stay where they are: `run` sorts first
    return order


class TableSegments(MutableMapping[str, Segment]):
    """One table's live segments by id, with their columns kept up to date.

    Iteration follows insertion order, as a dict's. Rows are stored densely: a
    removed segment's row is filled by the last one, so an addition or a removal
    costs O(1) (amortised: arrays double when full).

    The newest loads are kept in order too (`newest`, for `preserve_latest`), so a
    filter never sorts the table to find them.
    """

    def __init__(self, segments: Iterable[Segment] = ()) -> None:
        self._by_id: dict[str, Segment] = {}
        self._row_of: dict[str, int] = {}
        self._objects: list[Segment] = []
        self._codes: dict[GroupKey, int] = {}
        self.noted = False  # whether invalid-row counts were ever noted (an upsert table's index)
        self._changed: list[str] = []  # ids set or removed, in order, since position `_changed_base`
        self._changed_base = 0
        self._newest = NewestLoads()
        initial = list({s.id: s for s in segments}.values())
        self._arrays = _encode(initial, self._codes)
        for row, segment in enumerate(initial):
            self._by_id[segment.id] = segment
            self._row_of[segment.id] = row
            self._objects.append(segment)

    def columns(self) -> SegmentColumns:
        """The live segments as columns (a view valid until the table next changes)."""
        arrays = {k: a[: len(self._objects)] for k, a in self._arrays.items()}
        return SegmentColumns(self._objects, arrays, self._row_of, newest=self.newest)

    def newest(self, n: int) -> list[str]:
        """Ids of the `n` most recently loaded segments, oldest of them first (ties by id)."""
        return self._newest.ids(n, self._arrays["loaded"][: len(self._objects)], self._objects)

    def __getitem__(self, segment_id: str) -> Segment:
        return self._by_id[segment_id]

    def __contains__(self, segment_id: object) -> bool:
        return segment_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def values(self) -> ValuesView[Segment]:  # the dict's own views: no Python call per segment
        return self._by_id.values()

    def items(self) -> ItemsView[str, Segment]:
        return self._by_id.items()

    def __setitem__(self, segment_id: str, segment: Segment) -> None:
        row = self._row_of.get(segment_id)
        new = row is None
        if row is not None:  # described anew: it leaves the load order and comes back
            self._newest.removed(float(self._arrays["loaded"][row]), segment_id)
        if row is None:
            row = len(self._objects)
            self._objects.append(segment)
            self._row_of[segment_id] = row
            self._grow(row + 1)
        else:
            self._objects[row] = segment
        self._by_id[segment_id] = segment
        for name, values in _encode([segment], self._codes).items():
            if new or name != NOTED:  # a segment described anew keeps the count noted for it
                self._arrays[name][row] = values[0]
        self._newest.added(float(self._arrays["loaded"][row]), segment_id, len(self._by_id))
        self._note_change(segment_id)

    @property
    def mark(self) -> int:
        """A position in the table's changes, for `changed_since`."""
        return self._changed_base + len(self._changed)

    def changed_since(self, mark: int) -> list[str] | None:
        """Ids of the segments set or removed since `mark` (None: too long ago, look at all)."""
        if mark < self._changed_base:
            return None
        return self._changed[mark - self._changed_base :]

    def _note_change(self, segment_id: str) -> None:
        if len(self._changed) >= _CHANGES_KEPT:  # readers this far behind look at everything
            self._changed_base += len(self._changed)
            self._changed = []
        self._changed.append(segment_id)

    def note_invalid(self, counts: Mapping[str, int], whole: bool = False) -> None:
        """Note superseded rows per segment id (`whole`: the segments not named have none)."""
        column = self._arrays[NOTED]
        if whole:
            column[:] = 0
        for segment_id, count in counts.items():
            row = self._row_of.get(segment_id)
            if row is not None:
                column[row] = count
        self.noted = True

    def __delitem__(self, segment_id: str) -> None:
        del self._by_id[segment_id]
        self._note_change(segment_id)
        row = self._row_of.pop(segment_id)
        self._newest.removed(float(self._arrays["loaded"][row]), segment_id)
        last = len(self._objects) - 1
        moved = self._objects.pop()
        if row != last:  # the last row fills the hole
            self._objects[row] = moved
            self._row_of[moved.id] = row
            for values in self._arrays.values():
                values[row] = values[last]

    def _grow(self, needed: int) -> None:
        capacity = len(self._arrays["start"])
        if needed <= capacity:
            return
        bigger = max(16, 2 * capacity)
        for name, values in self._arrays.items():
            grown = np.zeros(bigger, values.dtype)
            grown[:capacity] = values
            self._arrays[name] = grown

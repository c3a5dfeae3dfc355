"""The upsert key index against a full recount, over random loads, merges (some in flight while
loads land), refreshes and other writers' changes (hypothesis)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compactor.catalog import key_index, key_values
from compactor.catalog.key_index import KeyColumns, KeyIndex, KeyRow
from compactor.domain.layout import refresh_output_prefix
from compactor.domain.plans import output_id, plan_id_for
from compactor.domain.segments import Segment, TimeRange
from tests.catalog.key_index_reference import ReferenceKeyIndex

T0 = datetime(2024, 1, 1, tzinfo=UTC)
Row = tuple[int, Any, int]  # key, comparison value, row hash


def recount(rows: Mapping[str, list[Row]], loaded: Mapping[str, datetime]) -> dict[str, int]:
    """Invalid rows per segment from every row, as the Spark scan ranks them."""
    best: dict[int, tuple[tuple[bool, Any, datetime, int], str]] = {}
    for sid, held in rows.items():
        for key, value, row_hash in held:
            rank = (value is not None, value, loaded[sid], row_hash)
            if key not in best or rank > best[key][0]:
                best[key] = (rank, sid)
    wins: dict[str, int] = {}
    for _, sid in best.values():
        wins[sid] = wins.get(sid, 0) + 1
    counts = {sid: len(held) - wins.get(sid, 0) for sid, held in rows.items()}
    return {sid: n for sid, n in counts.items() if n > 0}


@dataclass
class Table:
    """A table's rows per live segment, and what the catalog would say about each change."""

    rows: dict[str, list[Row]] = field(default_factory=dict)
    loaded: dict[str, datetime] = field(default_factory=dict)
    retired_by: dict[str, str] = field(default_factory=dict)
    hashes: itertools.count[int] = field(default_factory=itertools.count)
    loads: int = 0
    changes: list[str] = field(default_factory=list)  # ids set or removed, as the catalog logs them

    def live(self) -> dict[str, Segment]:
        return {
            sid: Segment(
                sid, "t", TimeRange(T0, T0 + timedelta(hours=1)), self.loaded[sid], records=len(held)
            )
            for sid, held in self.rows.items()
        }

    def load(self, keys_values: list[tuple[int, Any]], when: datetime | None = None) -> str:
        self.loads += 1
        sid = f"l{self.loads}"
        self.rows[sid] = [(k, v, next(self.hashes)) for k, v in keys_values]
        self.loaded[sid] = when or T0 + timedelta(minutes=self.loads)  # later loads, later times
        self.changes.append(sid)
        return sid

    def plan(self, inputs: list[str], refresh: bool) -> tuple[str, str, list[Row], datetime]:
        """A merge keeps the inputs' valid rows; a refresh keeps every row (of one segment)."""
        plan = plan_id_for("t", "refresh" if refresh else "upsert_compaction", inputs)
        out = f"{refresh_output_prefix(plan)}-1704067200-0-0" if refresh else output_id(plan)
        invalid = recount(self.rows, self.loaded)
        kept: list[Row] = []
        for sid in inputs:
            held = self.rows[sid]
            if refresh:
                kept += held
            else:  # the losers are the rows a key's winner outranks: drop as many as counted
                kept += [r for r in held if self._wins(r, sid)]
            assert refresh or len([r for r in held if self._wins(r, sid)]) == len(held) - invalid.get(sid, 0)
        return plan, out, kept, max(self.loaded[s] for s in inputs)

    def _wins(self, row: Row, sid: str) -> bool:
        key, value, row_hash = row
        rank = (value is not None, value, self.loaded[sid], row_hash)
        return all(
            rank >= (v is not None, v, self.loaded[other], h)
            for other, held in self.rows.items()
            for k, v, h in held
            if k == key
        )

    def winners(self, ids: list[str]) -> tuple[int, int]:
        """The keys `ids` win, and their winners' row hashes summed modulo 2^64, row by row."""
        kept = [h for sid in ids for row in self.rows[sid] if self._wins(row, sid) for h in [row[2]]]
        return len(kept), sum(kept) % 2**64

    def commit(self, inputs: list[str], planned: tuple[str, str, list[Row], datetime]) -> None:
        plan, out, kept, loaded = planned
        for sid in inputs:
            del self.rows[sid]
            self.retired_by[sid] = plan
        self.rows[out], self.loaded[out] = kept, loaded
        self.changes += [*inputs, out]

    def key_rows(self, ids: list[str] | None) -> list[KeyRow]:
        wanted = self.rows if ids is None else {sid: self.rows[sid] for sid in ids}
        return [KeyRow(k, v, h, sid) for sid, held in wanted.items() for k, v, h in held]

    def merged_by(self, plan_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for sid, plan in self.retired_by.items():
            if plan in plan_ids:
                found.setdefault(plan, set()).add(sid)
        return found

    def key_rows_of_keys(self, keys: np.ndarray, excluding: list[str]) -> list[KeyRow]:
        wanted = set(keys.tolist())
        return [
            KeyRow(k, v, h, sid)
            for sid, held in self.rows.items()
            if sid not in excluding
            for k, v, h in held
            if k in wanted
        ]

    # another writer's changes, which no plan of ours explains

    def foreign_delete(self, sid: str) -> None:
        del self.rows[sid]
        self.changes.append(sid)

    def foreign_shrink(self, sid: str, dropped: list[int]) -> None:
        """Rows deleted from a segment in place (a DELETE): its row count falls."""
        held = self.rows[sid]
        self.rows[sid] = [row for n, row in enumerate(held) if n % max(len(held), 1) not in dropped]
        self.changes.append(sid)

    def foreign_grow(self, sid: str, keys_values: list[tuple[int, Any]]) -> None:
        """Rows added to a segment in place: its row count rises."""
        self.rows[sid] = self.rows[sid] + [(k, v, next(self.hashes)) for k, v in keys_values]
        self.changes.append(sid)

    def foreign_rewrite(self, sid: str, parts: int) -> list[str]:
        """A segment rewritten as `parts` segments of new ids, its rows dealt among them."""
        held, when = self.rows.pop(sid), self.loaded[sid]
        made = [f"x{self.loads}-{sid}-{n}" for n in range(parts)]
        for n, out in enumerate(made):
            self.rows[out], self.loaded[out] = held[n::parts], when
        self.changes += [sid, *made]
        return made


class Follower:
    """What the stream does with an index: follow, read the new loads, and read again what it
    could not follow (`stream.key_indexes`)."""

    def __init__(self, told: bool = False) -> None:
        self.told = told  # told which segments changed (the catalog's log), or left to compare all
        self.mark = 0
        self.index = KeyIndex()
        self.rebuilds = 0  # whole-table reads
        self.read: list[str] = []  # segments read whole
        self.looked_up: list[int] = []  # keys whose rows were read in the rest of the table
        self.noted: dict[str, int] = {}  # the counts noted from `take_touched`, as the catalog's column

    def counts(self, table: Table) -> dict[str, int]:
        live = table.live()
        changed = table.changes[self.mark :] if self.told else None
        self.mark = len(table.changes)
        followed = self.index.follow(live, table.retired_by.get, changed, table.merged_by)
        assert not followed.orphans.size or followed.unfollowed, (
            "keys dropped only with what it could not follow"
        )
        self.read += followed.loads
        self.index.absorb([live[s] for s in followed.loads], table.key_rows(followed.loads))
        if followed.orphans.size:
            self.looked_up += followed.orphans.tolist()
            self.index.retake(table.key_rows_of_keys(followed.orphans, followed.loads))
        self.noted = {sid: n for sid, n in (self.noted | self.index.take_touched()).items() if sid in live}
        assert {sid: n for sid, n in self.noted.items() if n} == self.index.invalid(), "touched: every change"
        return self.index.invalid()

    def check_winners(self, table: Table) -> None:
        """What a merge of each segment, and of them all, must keep, as the index counts it. Its
        row hashes are exact only where every merge took loads it had read, as the stream's do
        (`_as_written`: a merge of a load it never read is followed by its count alone)."""
        for ids in [[sid] for sid in table.rows] + [sorted(table.rows)]:
            assert self.index.winners_of(ids) == table.winners(ids), ids


values = st.one_of(st.none(), st.integers(0, 3))
load_rows = st.lists(st.tuples(st.integers(0, 9), values), min_size=0, max_size=6)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("load"), load_rows),
        st.tuples(st.just("merge"), st.lists(st.integers(0, 50), min_size=1, max_size=4, unique=True)),
        st.tuples(st.just("merge_during_load"), st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True), load_rows),
        st.tuples(st.just("refresh"), st.integers(0, 50)),
        st.tuples(st.just("chain"), st.lists(st.integers(0, 50), min_size=2, max_size=3, unique=True)),
    ),
    min_size=1,
    max_size=14,
)  # fmt: skip


@given(steps, st.booleans())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_followed_index_counts_exactly_what_a_full_recount_counts(
    script: list[tuple[Any, ...]], told: bool
) -> None:
    follow_script(script, told)


def follow_script(script: list[tuple[Any, ...]], told: bool) -> Follower:
    table, follower = Table(), Follower(told)
    for step in script:
        live = sorted(table.rows)
        pick = (
            [live[i % len(live)] for i in step[1]]
            if live and step[0] != "load" and step[0] != "refresh"
            else []
        )
        pick = list(dict.fromkeys(pick))
        if step[0] == "load":
            table.load(step[1])
        elif step[0] == "merge" and pick:
            table.commit(pick, table.plan(pick, refresh=False))
        elif step[0] == "merge_during_load" and pick:
            planned = table.plan(pick, refresh=False)  # the merge reads its inputs ...
            new = table.load(step[2])  # ... a load lands and the stream reads it ...
            assert follower.counts(table) == recount(table.rows, table.loaded)
            assert follower.read[-1:] == [new]
            table.commit(pick, planned)  # ... and then the merge commits
        elif step[0] == "refresh" and live:
            one = [live[step[1] % len(live)]]
            table.commit(one, table.plan(one, refresh=True))
        elif step[0] == "chain" and len(pick) >= 2:  # merged, then merged again before a look
            table.commit(pick[:1], table.plan(pick[:1], refresh=False))
            first = sorted(set(table.rows) - set(live))[0]
            rest = [first, *pick[1:]]
            table.commit(rest, table.plan(rest, refresh=False))
        assert follower.counts(table) == recount(table.rows, table.loaded)
        follower.check_winners(table)
    assert follower.rebuilds == 0, "merges and refreshes are followed, never rebuilt"
    loads = [s for s in follower.read if s.startswith("l")]
    assert sorted(follower.read) == sorted(set(loads)), "each load read once, and only loads"
    return follower


@pytest.mark.parametrize("told", [False, True])
def test_other_writers_changes_are_read_again_only_where_they_happened(told: bool) -> None:
    table, follower = Table(), Follower(told)
    for rows in ([(1, 1), (2, 1)], [(1, 2), (3, 0)], [(2, 2), (3, 0)]):
        table.load(rows)
    assert follower.counts(table) == {"l1": 2, "l2": 1} == recount(table.rows, table.loaded)

    table.foreign_delete("l3")  # l3 won keys 2 and 3: their next best rows are elsewhere
    read = len(follower.read)
    assert follower.counts(table) == {"l1": 1} == recount(table.rows, table.loaded)
    assert follower.read[read:] == [] and sorted(follower.looked_up) == [2, 3]

    table.foreign_shrink("l2", [1])  # a row deleted in place (key 3): l2 is read again, whole
    assert follower.counts(table) == {"l1": 1} == recount(table.rows, table.loaded)
    assert follower.read[read:] == ["l2"] and sorted(follower.looked_up[2:]) == [1, 3]
    assert follower.rebuilds == 0


foreign_steps = st.lists(
    st.one_of(
        st.tuples(st.just("load"), load_rows),
        st.tuples(st.just("merge"), st.lists(st.integers(0, 50), min_size=1, max_size=4, unique=True)),
        st.tuples(st.just("refresh"), st.integers(0, 50)),
        st.tuples(st.just("foreign_delete"), st.integers(0, 50)),
        st.tuples(st.just("foreign_shrink"), st.integers(0, 50), st.lists(st.integers(0, 5), min_size=1, max_size=3)),
        st.tuples(st.just("foreign_grow"), st.integers(0, 50), load_rows),
        st.tuples(st.just("foreign_rewrite"), st.integers(0, 50), st.integers(1, 3)),
        st.tuples(st.just("merge_then_delete"), st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True)),
    ),
    min_size=1,
    max_size=16,
)  # fmt: skip


@given(foreign_steps, st.booleans(), st.sampled_from(["int", "str"]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_changes_it_cannot_follow_are_read_again_only_where_they_happened(
    script: list[tuple[Any, ...]], told: bool, pool: str
) -> None:
    """Other writers delete, shrink, grow and rewrite segments among our loads and merges (in
    the compact columns, and in the dict): the index always counts what a full recount counts,
    reads whole only the new loads and the segments another writer changed, and reads in the
    rest of the table only keys those segments held."""
    foreign_script(script, told, pool)


def foreign_script(script: list[tuple[Any, ...]], told: bool, pool: str) -> Follower:
    table, follower = Table(), Follower(told)
    choices = POOLS[pool]

    def coded(rows: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        return [(k, None if v is None else choices[(v * 5 + k) % len(choices)]) for k, v in rows]

    for step in script:
        live = sorted(table.rows)
        one = live[step[1] % len(live)] if live and isinstance(step[1], int) else None
        before = set(table.rows)
        held: set[int] = set()  # the keys of the segments another writer changed
        changed: set[str] = set()  # ... and the segments it changed or made
        if step[0] == "load":
            table.load(coded(step[1]))
        elif step[0] in ("merge", "merge_then_delete") and live:
            pick = list(dict.fromkeys(live[i % len(live)] for i in step[1]))
            table.commit(pick, table.plan(pick, refresh=False))
            if step[0] == "merge_then_delete":  # our merge's output, deleted before the index looked
                (out,) = set(table.rows) - before
                held |= {k for sid in pick for k, _, _ in table.rows[out]}
                table.foreign_delete(out)
        elif step[0] == "refresh" and one:
            table.commit([one], table.plan([one], refresh=True))
        elif step[0].startswith("foreign") and one:
            held |= {k for k, _, _ in table.rows[one]}
            changed.add(one)
            if step[0] == "foreign_delete":
                table.foreign_delete(one)
            elif step[0] == "foreign_shrink":
                table.foreign_shrink(one, step[2])
            elif step[0] == "foreign_grow":
                table.foreign_grow(one, coded(step[2]))
            else:
                changed |= set(table.foreign_rewrite(one, step[2]))
        read, looked = len(follower.read), len(follower.looked_up)
        assert follower.counts(table) == recount(table.rows, table.loaded)
        loads = {sid for sid in set(table.rows) - before if sid.startswith("l")}
        assert set(follower.read[read:]) <= loads | changed, "read whole: new loads and changed segments"
        assert set(follower.looked_up[looked:]) <= held, "looked up: only keys the changed segments held"
    assert follower.rebuilds == 0
    return follower


def test_ties_go_to_the_later_load_then_to_the_higher_row_hash() -> None:
    index, t = KeyIndex(), T0
    a = Segment("a", "t", TimeRange(t, t + timedelta(hours=1)), t, records=2)
    b = Segment("b", "t", TimeRange(t, t + timedelta(hours=1)), t + timedelta(seconds=1), records=1)
    c = Segment("c", "t", TimeRange(t, t + timedelta(hours=1)), t + timedelta(seconds=1), records=1)
    index.absorb([a], [KeyRow(1, 5, 100, "a"), KeyRow(2, None, 100, "a")])
    index.absorb([b, c], [KeyRow(1, 5, 7, "b"), KeyRow(1, 5, 9, "c")])  # b, c: later, c's hash higher
    assert index.invalid() == {"a": 1, "b": 1}
    d = Segment("d", "t", TimeRange(t, t + timedelta(hours=1)), t + timedelta(seconds=2), records=1)
    index.absorb([d], [KeyRow(2, None, 1, "d")])  # no value on either side: the later load wins
    assert index.invalid() == {"a": 2, "b": 1}


# The compact index against the dict it replaced (tests/catalog/key_index_reference.py) and a
# brute-force recount, over every kind of comparison value it codes and some it leaves to the dict.

D0 = datetime(2024, 5, 1, 12, tzinfo=UTC)
POOLS: dict[str, list[Any]] = {
    "int": [-(2**62), -3, 0, 1, 2, 2**62],
    "bool": [False, True, 0, 1],  # True == 1: one value, as Python compares them
    "float": [-math.inf, -2.5, -0.0, 0.0, 1e-300, 1.5, math.inf],
    "datetime": [D0 - timedelta(days=400), D0, D0 + timedelta(microseconds=1), D0 + timedelta(days=9)],
    "naive": [datetime(1969, 12, 31, 23, 59, 59, 999999), datetime(1970, 1, 1), datetime(2030, 1, 1)],
    "date": [date(1, 1, 1), date(1969, 12, 31), date(2024, 2, 29), date(9999, 12, 31)],
    "str": ["", "a", "b", "ba"],  # not coded: the index turns into the dict
    "int_then_float": [0, 1, 2, 1.0, 1.5],  # two kinds: coded while one, then the dict
    "big_int": [1, 2**70, -(2**70)],  # beyond 64 bits: the dict
}


def ranked_recount(rows: list[tuple[str, int, Any, int]], loaded: Mapping[str, datetime]) -> dict[str, int]:
    """Invalid rows per segment from every row in the order taken in: the first row of a key's
    best rank wins (what `absorb` does, row by row, when two rows rank equal)."""
    best: dict[int, tuple[tuple[bool, Any, datetime, int], str]] = {}
    held: dict[str, int] = {}
    for sid, key, value, row_hash in rows:
        held[sid] = held.get(sid, 0) + 1
        rank = (value is not None, value, loaded[sid], row_hash)
        if key not in best or rank > best[key][0]:
            best[key] = (rank, sid)
    for _, sid in best.values():
        held[sid] -= 1
    return {sid: n for sid, n in held.items() if n > 0}


def as_key_columns(rows: list[KeyRow]) -> list[KeyRow | KeyColumns]:
    """The rows as one `KeyColumns` where their values code, as a read through Arrow gives them."""
    encoded = key_values.encode_values([row.value for row in rows])
    if not rows or encoded is None:
        return list(rows)
    ids = sorted({row.segment_id for row in rows})
    return [
        KeyColumns(
            np.array([row.key for row in rows], np.int64),
            encoded[0],
            encoded[1],
            np.array([row.row_hash for row in rows], np.int64),
            np.array([ids.index(row.segment_id) for row in rows], np.int64),
            ids,
        )
    ]


@contextmanager
def chunks_of(size: int | None) -> Iterator[None]:
    """`absorb` takes rows in chunks of `size` (None: as it does)."""
    saved = key_index._CHUNK
    key_index._CHUNK = size or saved
    try:
        yield
    finally:
        key_index._CHUNK = saved


@given(st.data(), st.sampled_from(sorted(POOLS)), st.sampled_from([None, 1, 2, 5]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_compact_index_absorbs_loads_as_the_dict_did(
    data: st.DataObject, pool: str, chunk: int | None
) -> None:
    """Random loads (several a call, rows interleaved, keys colliding, values, load times and
    row hashes tied, rows of unknown segments), given as rows, as columns (as a Spark read
    through Arrow gives them) or as both, give the dict's winners, exactly."""
    values = st.sampled_from([None, *POOLS[pool]])
    compact, reference = KeyIndex(), ReferenceKeyIndex()
    taken: list[tuple[str, int, Any, int]] = []
    loaded: dict[str, datetime] = {}
    records: dict[str, int] = {}
    for call in range(data.draw(st.integers(1, 6))):
        count = data.draw(st.integers(0, 3))
        sids = [f"c{call}s{n}" for n in range(count)]
        for sid in sids:
            loaded[sid] = T0 + timedelta(minutes=data.draw(st.integers(0, 2)))  # equal, and earlier too
        shapes = data.draw(st.lists(st.tuples(st.integers(0, 7), values, st.integers(-1, 1)), min_size=1))
        picked = st.lists(
            st.tuples(st.sampled_from([*sids, "unknown"]), st.sampled_from(shapes)), max_size=25
        )
        rows = [(sid, *shape) for sid, shape in data.draw(picked)]  # the same row in two loads, often
        if pool == "int_then_float" and call == 0:
            rows = [r for r in rows if not isinstance(r[2], float)]
        key_rows = [KeyRow(key, value, row_hash, sid) for sid, key, value, row_hash in rows]
        for sid in sids:
            records[sid] = sum(1 for r in rows if r[0] == sid)
        segments = [
            Segment(sid, "t", TimeRange(T0, T0 + timedelta(hours=1)), loaded[sid], records=records[sid])
            for sid in sids
        ]
        as_columns = data.draw(st.integers(0, len(key_rows)))  # the first rows come as columns
        given = [*as_key_columns(key_rows[:as_columns]), *key_rows[as_columns:]]
        with chunks_of(chunk):
            compact.absorb(segments, given)
        reference.absorb(segments, key_rows)
        taken += [r for r in rows if r[0] != "unknown"]
        assert compact.take_touched() == reference.take_touched()
        assert compact.invalid() == reference.invalid() == ranked_recount(taken, loaded)
        assert len(compact) == len(reference)
    assert compact.compact or pool in ("str", "big_int", "int_then_float")


class Twins(Follower):
    """A follower whose index is checked against the dict's after every change."""

    def __init__(self, told: bool) -> None:
        super().__init__(told)
        self.reference = ReferenceKeyIndex()

    def counts(self, table: Table) -> dict[str, int]:
        live = table.live()
        changed = table.changes[self.mark :] if self.told else None
        self.mark = len(table.changes)
        followed = self.index.follow(live, table.retired_by.get, changed)
        loads = followed.loads
        assert loads == self.reference.follow(live, table.retired_by.get, changed)
        assert not followed.unfollowed and not followed.orphans.size
        for index in (self.index, self.reference):
            index.absorb([live[s] for s in loads], table.key_rows(loads))
        assert self.index.take_touched() == self.reference.take_touched()
        assert len(self.index) == len(self.reference)
        assert self.index.invalid() == self.reference.invalid()
        return self.index.invalid()


@given(
    steps, st.booleans(), st.sampled_from(sorted(POOLS)), st.lists(st.booleans(), min_size=20, max_size=20)
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_compact_index_follows_merges_as_the_dict_did(
    script: list[tuple[Any, ...]], told: bool, pool: str, same_time: list[bool]
) -> None:
    """The script of the test above, with every kind of value and loads at equal times: the
    compact index and the dict agree on every count, touched or not, and a recount with them."""
    table, twins = Table(), Twins(told)
    choices = POOLS[pool]
    when = T0
    for number, step in enumerate(script):
        live = sorted(table.rows)
        pick = (
            list(dict.fromkeys(live[i % len(live)] for i in step[1]))
            if live and step[0] in ("merge", "merge_during_load", "chain")
            else []
        )
        when += timedelta(minutes=0 if same_time[number % 20] else 1)
        if step[0] in ("load", "merge_during_load"):
            rows = [(k, None if v is None else choices[(v * 5 + k) % len(choices)]) for k, v in step[-1]]
        if step[0] == "load":
            table.load(rows, when)
        elif step[0] == "merge" and pick:
            table.commit(pick, table.plan(pick, refresh=False))
        elif step[0] == "merge_during_load" and pick:
            planned = table.plan(pick, refresh=False)
            table.load(rows, when)
            assert twins.counts(table) == recount(table.rows, table.loaded)
            table.commit(pick, planned)
        elif step[0] == "refresh" and live:
            one = [live[step[1] % len(live)]]
            table.commit(one, table.plan(one, refresh=True))
        elif step[0] == "chain" and len(pick) >= 2:
            table.commit(pick[:1], table.plan(pick[:1], refresh=False))
            first = sorted(set(table.rows) - set(live))[0]
            rest = [first, *pick[1:]]
            table.commit(rest, table.plan(rest, refresh=False))
        assert twins.counts(table) == recount(table.rows, table.loaded)
    assert twins.rebuilds == 0


def test_values_code_in_their_order_with_none_below_all() -> None:
    for pool in ("int", "float", "datetime", "naive", "date"):
        ordered = [None, *sorted(POOLS[pool])]
        kind, codes = key_values.encode_values(ordered) or (None, None)
        assert kind == pool and codes is not None
        assert codes[0] == key_values.ABSENT and codes.dtype == np.int64
        for (a, x), (b, y) in itertools.pairwise(zip(ordered, codes.tolist(), strict=True)):
            assert x < y if a is None or a < b else x == y, (a, b)
        back = key_values.decode_values(kind, codes)
        assert back == ordered and [type(v) for v in back[1:]] == [type(v) for v in ordered[1:]]


def test_float_codes_keep_every_order_python_keeps() -> None:
    floats = [-math.inf, -1e308, -1.0, -5e-324, -0.0, 0.0, 5e-324, 1.0, 1e308, math.inf]
    _, codes = key_values.encode_values(floats) or (None, np.empty(0))
    assert codes.tolist() == sorted(codes.tolist())
    assert codes[4] == codes[5], "-0.0 == 0.0"
    assert len(set(codes.tolist())) == len(floats) - 1
    _, nans = key_values.encode_values([math.nan, -math.nan, math.inf]) or (None, np.empty(0))
    assert nans[0] == nans[1] > nans[2], "NaN above +inf and equal to itself, as Spark ranks it"


@pytest.mark.parametrize(
    ("values", "comparable"),
    [
        (["a", None, "b"], True),  # strings
        ([Decimal(1), Decimal("1.5")], True),
        ([1, 1.5, 1.0], True),  # two kinds in one column
        ([2**63, 1], True),  # beyond int64
        ([-(2**63), 1], True),  # the code of None
        ([datetime(2024, 1, 1), datetime(2024, 1, 1, tzinfo=UTC)], False),  # naive beside aware
        ([date(2024, 1, 1), datetime(2024, 1, 1)], False),
    ],
)
def test_values_that_cannot_be_coded_leave_the_index_to_the_dict(values: list[Any], comparable: bool) -> None:
    assert key_values.encode_values(values) is None
    if not comparable:
        return  # the dict raises on them as it did
    index, reference = KeyIndex(), ReferenceKeyIndex()
    segment = Segment("a", "t", TimeRange(T0, T0 + timedelta(hours=1)), T0, records=2 * len(values))
    rows = [KeyRow(k, v, n, "a") for n, v in enumerate(values) for k in (1, n + 2)]
    for one in (index, reference):
        one.absorb([], [KeyRow(9, values[-1], 0, "a")])  # a load of nothing: nothing changes
        one.absorb([segment], rows)
    assert not index.compact
    assert index.invalid() == reference.invalid() and len(index) == len(reference) == len(values) + 1


def test_a_column_coded_until_a_value_it_cannot_code_keeps_its_winners() -> None:
    index, reference = KeyIndex(), ReferenceKeyIndex()
    for n, values in enumerate(([3, None, 1, 2], [2.5, 3.0, None, 0.5], [2**64, 0, 0, 0])):
        segment = Segment(f"s{n}", "t", TimeRange(T0, T0 + timedelta(hours=1)), T0, records=4)
        rows = [KeyRow(k, v, 0, f"s{n}") for k, v in enumerate(values)]
        for one in (index, reference):
            one.absorb([segment], rows)
        assert index.compact == (n == 0)
        assert index.invalid() == reference.invalid() and index.take_touched() == reference.take_touched()


def test_bools_and_all_none_code_as_ints_and_as_nothing() -> None:
    kind, codes = key_values.encode_values([True, None, 0]) or (None, np.empty(0))
    assert kind == "int" and codes.tolist() == [1, key_values.ABSENT, 0]
    kind, codes = key_values.encode_values([None, None]) or ("?", None)
    assert kind is None and codes is not None and (codes == key_values.ABSENT).all()


def test_many_small_loads_keep_few_runs_and_every_key() -> None:
    index, reference = KeyIndex(), ReferenceKeyIndex()
    for n in range(200):
        segment = Segment(
            f"s{n}", "t", TimeRange(T0, T0 + timedelta(hours=1)), T0 + timedelta(seconds=n), records=7
        )
        rows = [KeyRow((n * 7 + i) * 7919 % 1000, (n + i) % 5, n, f"s{n}") for i in range(7)]
        for one in (index, reference):
            one.absorb([segment], rows)
    assert index.invalid() == reference.invalid() and len(index) == len(reference) == 1000
    assert len(index._runs.runs) <= 12 and index.compact
    assert index.nbytes == 28 * len(index)


def test_a_winner_merged_since_ranks_with_its_merge_outputs_load_time() -> None:
    """A merge output carries its inputs' latest load time; a load read after the merge was
    followed ties with the merged winner on it (and loses on the row hash)."""
    table, twins = Table(hashes=itertools.count(100, -1)), Twins(told=True)
    first = table.load([(1, 5)])
    table.load([(2, 0)])
    assert twins.counts(table) == {}
    table.commit([first, "l2"], table.plan([first, "l2"], refresh=False))
    table.load([(1, 5)], when=table.loaded["l2"])  # as late as the output, with a lower row hash
    assert twins.counts(table) == recount(table.rows, table.loaded) == {"l3": 1}


# -- snapshots: an index that outlives the job -------------------------------------------------

restart_steps = st.lists(
    st.one_of(
        st.tuples(st.just("load"), load_rows),
        st.tuples(st.just("merge"), st.lists(st.integers(0, 50), min_size=1, max_size=4, unique=True)),
        st.tuples(st.just("refresh"), st.integers(0, 50)),
        st.tuples(st.just("snapshot")),
        st.tuples(st.just("restart")),
        st.tuples(st.just("lose_snapshot")),
        st.tuples(st.just("damage_snapshot")),
        st.tuples(st.just("foreign_delete"), st.integers(0, 50)),
        st.tuples(st.just("foreign_shrink"), st.integers(0, 50), st.lists(st.integers(0, 5), min_size=1, max_size=3)),
        st.tuples(st.just("late_load"), load_rows),  # stamped before every other load
    ),
    min_size=1,
    max_size=16,
)  # fmt: skip


class Restarting(Follower):
    """A follower that snapshots its index, and restarts from the last snapshot (or rebuilds
    when there is none, or it is damaged): what `stream.key_indexes` does across restarts."""

    def __init__(self) -> None:
        super().__init__(told=False)
        self.saved: bytes | None = None
        self.read_after_restart: list[str] = []

    def restart(self) -> None:
        self.mark, self.noted = 0, {}
        if self.saved is None:
            self.index = KeyIndex()  # nothing to restore: the next look rebuilds
            self.index_lost = True
            return
        try:
            self.index = KeyIndex.restored(self.saved)
            self.index_lost = False
            self.noted = self.index.invalid()  # a new index: every count noted whole, as `KeyIndexes` does
        except key_index.SnapshotUnreadable:
            self.index, self.index_lost = KeyIndex(), True

    def counts(self, table: Table) -> dict[str, int]:
        if getattr(self, "index_lost", False):  # as `KeyIndexes` does: no index, one scan
            self.index_lost = False
            self.index, self.rebuilds = KeyIndex(), self.rebuilds + 1
            self.index.absorb(table.live().values(), table.key_rows(None))
            self.noted = {}
        before = len(self.read)
        counted = super().counts(table)
        self.read_after_restart += self.read[before:]
        return counted


@given(restart_steps)
@example(
    [("load", []), ("snapshot",), ("load", [(0, None)]), ("merge", [0, 1]), ("restart",)]
)  # loaded after the snapshot, merged before the restart
@example(
    [
        ("load", []),
        ("load", [(0, 0)]),
        ("refresh", 1),
        ("snapshot",),
        ("load", []),
        ("load", []),
        ("load", []),
        ("load", [(0, None)]),
        ("merge", [5]),
        ("foreign_shrink", 41, [0]),
        ("restart",),
    ]
)  # merged after the snapshot, and the output's one row deleted by another writer before the restart
@example(
    [
        ("load", [(0, 1), (0, 0)]),
        ("snapshot",),
        ("refresh", 0),
        ("foreign_shrink", 0, [0]),
        ("load", [(0, 0)]),
        ("restart",),
    ]
)  # refreshed after the snapshot, and the output's winning row deleted: as many rows as winners still
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_an_index_restored_from_its_snapshot_counts_exactly_what_a_full_recount_counts(
    script: list[tuple[Any, ...]],
) -> None:
    restart_script(script)


def restart_script(script: list[tuple[Any, ...]]) -> Restarting:
    table, follower = Table(), Restarting()
    foreign: set[str] = set()  # the segments another writer changed since the last snapshot
    saw: set[str] = set()  # the segments live when it was taken
    for step in script:
        live = sorted(table.rows)
        if step[0] == "load":
            table.load(step[1])
        elif step[0] == "late_load":
            table.load(step[1], when=T0)
        elif step[0] == "merge" and live:
            pick = list(dict.fromkeys(live[i % len(live)] for i in step[1]))
            table.commit(pick, table.plan(pick, refresh=False))
        elif step[0] == "refresh" and live:
            one = [live[step[1] % len(live)]]
            table.commit(one, table.plan(one, refresh=True))
        elif step[0] == "snapshot":
            follower.counts(table)  # a snapshot is of an index brought up to the catalog
            taken = follower.index.snapshot()
            follower.saved, foreign, saw = taken and taken.encode(), set(), set(table.rows)
            assert follower.saved is not None
        elif step[0] == "restart":
            rebuilds, follower.read_after_restart = follower.rebuilds, []
            follower.restart()
            assert follower.counts(table) == recount(table.rows, table.loaded)
            if follower.saved is not None and follower.rebuilds == rebuilds:
                new_since = set(table.rows) - saw
                assert set(follower.read_after_restart) <= new_since | foreign, (
                    "only what came after the snapshot, or another writer changed, is read"
                )
        elif step[0] == "lose_snapshot":
            follower.saved = None
        elif step[0] == "damage_snapshot" and follower.saved is not None:
            follower.saved = follower.saved[: len(follower.saved) // 2] + b"\x00" * 8
        elif step[0] == "foreign_delete" and live:
            gone = live[step[1] % len(live)]
            table.foreign_delete(gone)  # nothing says where its keys went
            foreign.add(gone)
        elif step[0] == "foreign_shrink" and live:
            shrunk = live[step[1] % len(live)]
            table.foreign_shrink(shrunk, step[2])
            foreign.add(shrunk)
        assert follower.counts(table) == recount(table.rows, table.loaded)
    return follower


@pytest.mark.parametrize("told", [False, True])
@pytest.mark.parametrize("change", ["shrink", "grow"])
def test_a_merge_output_another_writer_changed_before_the_index_looked_is_read_again(
    told: bool, change: str
) -> None:
    """The index takes a merge's output as the plan wrote it; another writer's change to it
    before the index looked shows in its row count, out of what the merge can have written (its
    inputs' winners at least, their rows at most): the output is read again, not followed."""
    table, follower = Table(), Follower(told)
    first = table.load([(1, 1), (2, 1)])
    table.load([(3, 1)])
    assert follower.counts(table) == {}
    table.commit([first, "l2"], table.plan([first, "l2"], refresh=False))
    (merged,) = table.rows
    if change == "shrink":
        table.foreign_shrink(merged, [0])  # key 1's winner goes: a later load's row wins it
    else:
        table.foreign_grow(merged, [(4, 0)])  # a key no load had: the output wins it
    read = len(follower.read)
    assert follower.counts(table) == recount(table.rows, table.loaded)
    assert follower.read[read:] == [merged] and follower.rebuilds == 0
    table.load([(1, 0)])
    assert follower.counts(table) == recount(table.rows, table.loaded)


def test_a_merge_output_holding_fewer_rows_than_winners_beside_a_new_load_is_followed() -> None:
    """An upsert merge judged its rows against a load the index has not read yet (a concurrent
    loader): it holds fewer rows than its inputs' winners, and the new load wins the rest. The
    output is followed, not read again (a shrink by another writer beside a new load looks the
    same and goes unseen: the counts cannot tell them apart)."""
    table, follower = Table(), Follower(False)
    first = table.load([(1, 1), (2, 1)])
    assert follower.counts(table) == {}
    newer = table.load([(1, 2)])  # lands before the merge reads, after the index looked
    table.commit([first], table.plan([first], refresh=False))
    read = len(follower.read)
    assert follower.counts(table) == recount(table.rows, table.loaded)
    assert follower.read[read:] == [newer] and follower.rebuilds == 0


def test_a_merge_since_the_snapshot_of_a_load_it_never_read_is_read_again_whatever_its_load_time() -> None:
    """A load after the snapshot whose load time is older than the snapshot's loads (another
    producer's clock), merged before the restart: the restored index finds, in the plan's
    record, an input it never read, and reads the output again."""
    table, follower = Table(), Restarting()
    first = table.load([(1, 1), (2, 1)])
    table.load([(3, 1)])
    follower.counts(table)
    taken = follower.index.snapshot()
    follower.saved = taken and taken.encode()
    late = table.load([(1, 2), (3, 2)], when=T0)  # newer versions, stamped before every load
    table.commit([first, late], table.plan([first, late], refresh=False))
    follower.restart()
    follower.read_after_restart = []
    (merged,) = set(table.rows) - {"l2"}
    assert follower.counts(table) == recount(table.rows, table.loaded) == {"l2": 1}
    assert follower.read_after_restart == [merged] and follower.rebuilds == 0


def test_a_restart_from_a_snapshot_reads_only_the_loads_after_it_and_no_rebuild() -> None:
    table, follower = Table(), Restarting()
    for rows in ([(1, 1), (2, 1)], [(1, 2), (3, 0)]):
        table.load(rows)
    follower.counts(table)
    taken = follower.index.snapshot()
    follower.saved = taken and taken.encode()
    merged = sorted(table.rows)
    table.commit(merged, table.plan(merged, refresh=False))  # merged after the snapshot
    table.load([(2, 5)])
    follower.restart()
    follower.read_after_restart = []
    assert (
        follower.counts(table)
        == recount(table.rows, table.loaded)
        == {next(iter(set(table.rows) - {"l3"})): 1}
    )
    assert follower.read_after_restart == ["l3"] and follower.rebuilds == 0


def test_a_damaged_or_foreign_snapshot_is_refused_saying_why() -> None:
    index = KeyIndex()
    index.absorb(
        [
            Table().live().get("x")
            or Segment("l1", "t", TimeRange(T0, T0 + timedelta(hours=1)), T0, records=1)
        ],
        [KeyRow(1, 1, 1, "l1")],
    )
    taken = index.snapshot()
    assert taken is not None and taken.keys == 1
    data = taken.encode()
    assert KeyIndex.restored(data).invalid() == index.invalid()
    with pytest.raises(key_index.SnapshotUnreadable, match="not a key index snapshot"):
        KeyIndex.restored(data[:-20])
    with pytest.raises(key_index.SnapshotUnreadable, match="not a key index snapshot"):
        KeyIndex.restored(b"PK\x03\x04 garbage")
    index._to_dict()  # values the columns cannot hold: the dict has no snapshot
    assert index.snapshot() is None


# -- holders of segments no longer live: dropped, in memory and in snapshots --------------------


def _only_live_holders(index: KeyIndex) -> None:
    """Dropping the dead leaves one holder per live segment, and every key names one of them."""
    index._drop_dead()
    assert sorted(h.segment_id for h in index._read) == sorted(index.segment_ids)
    assert all(h.parent is None and h.number == n for n, h in enumerate(index._read))
    if index.compact:
        assert all(int(run.holders.max()) < len(index._read) for run in index._runs.runs if len(run))


@given(steps, st.booleans())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_dropping_dead_holders_before_every_load_changes_no_count(
    script: list[tuple[Any, ...]], told: bool
) -> None:
    with patch.object(KeyIndex, "_too_many_dead", lambda self: True):
        follower = follow_script(script, told)
    _only_live_holders(follower.index)


@given(foreign_steps, st.booleans(), st.sampled_from(["int", "str"]))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_dropping_dead_holders_among_other_writers_changes_changes_no_count(
    script: list[tuple[Any, ...]], told: bool, pool: str
) -> None:
    """In the compact columns and in the dict alike."""
    with patch.object(KeyIndex, "_too_many_dead", lambda self: True):
        follower = foreign_script(script, told, pool)
    _only_live_holders(follower.index)


@given(restart_steps)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_dropping_dead_holders_changes_nothing_a_restart_follows(script: list[tuple[Any, ...]]) -> None:
    with patch.object(KeyIndex, "_too_many_dead", lambda self: True):
        restart_script(script)


def test_an_index_keeps_holders_for_its_live_segments_not_for_every_load_it_read() -> None:
    """Loads merged away, and loads another writer removed: their holders go, from memory past
    `_DEAD_HOLDERS` and from every snapshot."""
    table, follower = Table(), Follower(told=True)
    holders = []
    for _ in range(3 * key_index._DEAD_HOLDERS // 2):
        table.load([(1, 1), (2, 2)])
        gone = table.load([(3, 3)])
        merged = sorted(sid for sid in table.rows if sid != gone)
        if len(merged) > 1:
            table.commit(merged, table.plan(merged, refresh=False))
        assert follower.counts(table) == recount(table.rows, table.loaded)
        table.foreign_delete(gone)  # nothing says where its keys went: its holder is forgotten
        assert follower.counts(table) == recount(table.rows, table.loaded)
        holders.append(len(follower.index._read))
    assert len(table.rows) == 1 and table.loads == 3 * key_index._DEAD_HOLDERS
    assert max(holders) <= 2 * len(table.rows) + key_index._DEAD_HOLDERS + 2, max(holders)
    taken = follower.index.snapshot()
    assert taken is not None
    meta = json.loads(taken.columns["meta"].tobytes())
    assert [sid for sid, *_ in meta["holders"]] == sorted(table.rows), "a snapshot holds the live ones"
    restored = KeyIndex.restored(taken.encode())
    assert restored.invalid() == follower.index.invalid() == recount(table.rows, table.loaded)


def test_the_winners_of_segments_sum_their_row_hashes_modulo_2_64() -> None:
    """Row hashes are signed 64-bit (Spark's xxhash64): the sum wraps as the certificate's does;
    a segment the index does not hold has no answer; the dict the index can turn into agrees."""
    index = KeyIndex()
    loads = [Segment(sid, "t", TimeRange(T0, T0 + timedelta(hours=1)), T0 + timedelta(minutes=n), records=2)
             for n, sid in enumerate(["a", "b"])]  # fmt: skip
    big, low = 2**63 - 1, -(2**63)
    rows = [KeyRow(1, 5, big, "a"), KeyRow(2, 5, big, "a"), KeyRow(2, 6, low, "b"), KeyRow(3, 1, -1, "b")]
    index.absorb(loads, rows)
    assert index.winners_of(["a"]) == (1, big)
    assert index.winners_of(["b"]) == (2, (low - 1) % 2**64)
    assert index.winners_of(["a", "b"]) == (3, (big + low - 1) % 2**64)
    assert index.winners_of([]) == (0, 0)
    assert index.winners_of(["a", "gone"]) is None
    index.retake([KeyRow(4, Decimal("1.5"), 7, "a")])  # a decimal: the dict from here on
    assert not index.compact
    assert index.winners_of(["a"]) == (2, (big + 7) % 2**64)
    assert index.winners_of(["a", "b"]) == (4, (big + low - 1 + 7) % 2**64)

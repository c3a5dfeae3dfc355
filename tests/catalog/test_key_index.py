"""The upsert key index against a full recount, over random loads, merges (some in flight while
loads land), refreshes and other writers' changes (hypothesis)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.catalog.key_index import KeyIndex, KeyRow
from compactor.domain.layout import refresh_output_prefix
from compactor.domain.plans import output_id, plan_id_for
from compactor.domain.segments import Segment, TimeRange

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

    def load(self, keys_values: list[tuple[int, Any]]) -> str:
        self.loads += 1
        sid = f"l{self.loads}"
        self.rows[sid] = [(k, v, next(self.hashes)) for k, v in keys_values]
        self.loaded[sid] = T0 + timedelta(minutes=self.loads)  # later loads, later times
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


class Follower:
    """What the stream does with an index: follow, read the new loads, or rebuild."""

    def __init__(self, told: bool = False) -> None:
        self.told = told  # told which segments changed (the catalog's log), or left to compare all
        self.mark = 0
        self.index = KeyIndex()
        self.rebuilds = 0
        self.read: list[str] = []
        self.noted: dict[str, int] = {}  # the counts noted from `take_touched`, as the catalog's column

    def counts(self, table: Table) -> dict[str, int]:
        live = table.live()
        changed = table.changes[self.mark :] if self.told else None
        self.mark = len(table.changes)
        loads = self.index.follow(live, table.retired_by.get, changed)
        if loads is None:
            self.index, self.rebuilds, self.noted = KeyIndex(), self.rebuilds + 1, {}
            self.index.absorb(live.values(), table.key_rows(None))
        else:
            self.read += loads
            self.index.absorb([live[s] for s in loads], table.key_rows(loads))
        self.noted = {sid: n for sid, n in (self.noted | self.index.take_touched()).items() if sid in live}
        assert {sid: n for sid, n in self.noted.items() if n} == self.index.invalid(), "touched: every change"
        return self.index.invalid()


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
    assert follower.rebuilds == 0, "merges and refreshes are followed, never rebuilt"
    loads = [s for s in follower.read if s.startswith("l")]
    assert sorted(follower.read) == sorted(set(loads)), "each load read once, and only loads"


@pytest.mark.parametrize("told", [False, True])
def test_other_writers_changes_rebuild_the_index_and_it_counts_as_a_scan_would(told: bool) -> None:
    table, follower = Table(), Follower(told)
    for rows in ([(1, 1), (2, 1)], [(1, 2), (3, 0)], [(2, 2), (3, 0)]):
        table.load(rows)
    assert follower.counts(table) == {"l1": 2, "l2": 1} == recount(table.rows, table.loaded)

    del table.rows["l3"]  # another writer removed a segment: a winner may have gone with it
    table.changes.append("l3")
    assert follower.counts(table) == {"l1": 1} == recount(table.rows, table.loaded)
    assert follower.rebuilds == 1

    table.rows["l2"] = table.rows["l2"][:1]  # another writer deleted a row (key 3): l2 shrank
    table.changes.append("l2")
    assert follower.counts(table) == {"l1": 1} == recount(table.rows, table.loaded)
    assert follower.rebuilds == 2


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

"""The key index's winners as numpy columns (see `catalog.key_index`): per key hash, the winner's
coded comparison value, row hash and holder id, 28 bytes a key.

Keys live in sorted runs, each key in exactly one run, like a log-structured merge tree: a
chunk's keys are looked up in every run (`np.searchsorted`), winners that lose are written over
in place, and keys new to the index become a new run, merged with the run before it while that
run is at most twice its size. So a load costs its own rows times a log factor (the searches,
and the merges amortised), never a copy of the index."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from compactor.catalog.key_values import Ints

Bools = npt.NDArray[np.bool_]
_NO_KEYS: Ints = np.empty(0, np.int64)


class Run:
    """Keys sorted and unique, with their winners' coded value, row hash and holder id."""

    __slots__ = ("holders", "keys", "rows", "values")

    def __init__(self, keys: Ints, values: Ints, rows: Ints, holders: npt.NDArray[np.int32]) -> None:
        self.keys, self.values, self.rows, self.holders = keys, values, rows, holders

    def __len__(self) -> int:
        return len(self.keys)

    def without(self, dropped: Bools) -> Run:
        kept = ~dropped
        return Run(self.keys[kept], self.values[kept], self.rows[kept], self.holders[kept])

    def merged(self, newer: Run) -> Run:
        """One run of both (their keys are disjoint)."""
        at = np.searchsorted(self.keys, newer.keys)
        return Run(
            np.insert(self.keys, at, newer.keys),
            np.insert(self.values, at, newer.values),
            np.insert(self.rows, at, newer.rows),
            np.insert(self.holders, at, newer.holders),
        )

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes + self.rows.nbytes + self.holders.nbytes


class Found(NamedTuple):
    """Where sorted, unique keys are held: each key's run (-1: in none) and place in it."""

    runs: Ints
    spots: Ints

    @property
    def held(self) -> Bools:
        return self.runs >= 0


class KeyRuns:
    """The runs; see the module."""

    def __init__(self, runs: list[Run] | None = None) -> None:
        self.runs = [run for run in runs or [] if len(run)]  # sizes falling: see the module

    def __len__(self) -> int:
        return sum(len(run) for run in self.runs)

    @property
    def nbytes(self) -> int:
        return sum(run.nbytes for run in self.runs)

    def find(self, keys: Ints) -> Found:
        """Where `keys` (sorted, unique) are held."""
        runs, spots = np.full(len(keys), -1, np.int64), np.zeros(len(keys), np.int64)
        for number, run in enumerate(self.runs):
            where = np.minimum(np.searchsorted(run.keys, keys), len(run) - 1)
            hit = run.keys[where] == keys
            runs[hit], spots[hit] = number, where[hit]
        return Found(runs, spots)

    def winners(self, found: Found) -> tuple[Ints, Ints, Ints]:
        """The coded values, row hashes and holder ids of the keys `found` holds, in order."""
        held = found.held
        runs, spots = found.runs[held], found.spots[held]
        values, rows, holders = (np.empty(len(runs), np.int64) for _ in range(3))
        for number, run in enumerate(self.runs):
            mine = runs == number
            if mine.any():
                values[mine], rows[mine] = run.values[spots[mine]], run.rows[spots[mine]]
                holders[mine] = run.holders[spots[mine]]
        return values, rows, holders

    def overwrite(self, found: Found, better: Bools, values: Ints, rows: Ints, holders: Ints) -> None:
        """Write new winners over the held keys `better` marks (among those `found` holds, in
        order; `values`, `rows` and `holders` are given for each of those)."""
        runs, spots = found.runs[found.held], found.spots[found.held]
        for number, run in enumerate(self.runs):
            mine = better & (runs == number)
            if mine.any():
                spot = spots[mine]
                run.values[spot], run.rows[spot], run.holders[spot] = values[mine], rows[mine], holders[mine]

    def add(self, keys: Ints, values: Ints, rows: Ints, holders: Ints) -> None:
        """Keys new to the index (sorted, unique), as a run merged in as the module says."""
        if not len(keys):
            return
        runs = self.runs
        runs.append(Run(keys, values, rows, holders.astype(np.int32)))
        while len(runs) > 1 and len(runs[-2]) <= 2 * len(runs[-1]):
            newer = runs.pop()
            runs[-1] = runs[-1].merged(newer)

    def drop(self, doomed: Bools) -> Ints:
        """Drop the winners whose holder id `doomed` marks; their keys."""
        dropped, runs = [], []
        for run in self.runs:
            lost = doomed[run.holders]
            if lost.any():
                dropped.append(run.keys[lost])
                run = run.without(lost)
            if len(run):
                runs.append(run)
        self.runs = runs
        return np.concatenate(dropped) if dropped else _NO_KEYS

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

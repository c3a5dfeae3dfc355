"""First-fit and best-fit bin packing over sizes in decreasing order (pure utility)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")
Strategy = Literal["first_fit", "best_fit"]


class _Placement(NamedTuple):
    """One light item to place, with the packing's limits: what a bin pick needs."""

    weight: int
    start: float  # the item's interval
    end: float
    windows: tuple[int, ...]  # the item's time window and its neighbours
    capacity: int
    max_span: float
    best_fit: bool


def pack(
    items: Sequence[T],
    size: Callable[[T], int],
    capacity: int,
    strategy: Strategy,
    span: Callable[[T], tuple[float, float]] | None = None,
    max_span: float = float("inf"),
) -> list[list[T]]:
    """Pack `items` into bins whose total size stays within `capacity`.

    Items are placed largest first. `first_fit` puts an item in the first bin
    (in creation order) with room; `best_fit` in the fullest bin with room
    (the earliest of equally full ones). With `span`, each item also covers an
    interval (start, end) and a bin's hull may not exceed `max_span` (a
    time-width limit). An item larger than `capacity` gets a bin of its own.
    Ties are broken by input order: deterministic.
    """
    spans = [span(item) for item in items] if span is not None else [(0.0, 0.0)] * len(items)
    bins = pack_indices(
        np.fromiter(map(size, items), np.int64, len(items)),
        np.fromiter((start for start, _ in spans), np.float64, len(items)),
        np.fromiter((end for _, end in spans), np.float64, len(items)),
        capacity,
        strategy,
        max_span if span is not None else float("inf"),
    )
    return [[items[i] for i in members] for members in bins]


def pack_indices(
    weights: npt.NDArray[np.int64],
    starts: npt.NDArray[np.float64],
    ends: npt.NDArray[np.float64],
    capacity: int,
    strategy: Strategy,
    max_span: float = float("inf"),
    singletons: bool = True,
) -> list[list[int]]:
    """`pack` over arrays: the bins, in creation order, as lists of item indices.

    With `singletons` off, bins of one item are left out of the result (building
    a million one-item lists nobody reads costs more than the packing).

    Two facts keep this near-linear for millions of items. An item heavier than
    half the capacity never fits a bin opened before it (that bin already holds
    an item at least as heavy), so every such item opens its own bin, and those
    bins are created in (weight descending, index) order without being sorted:
    a bin's rank is compared only when an item could join it. The lighter items
    are then placed one by one; bins are indexed by the `max_span`-wide window of
    their first item (a bin whose first item starts more than one window away
    cannot take the item), heavy bins in window-sorted arrays checked with numpy,
    light bins in lists sorted by load so only bins with room are looked at.
    """
    windowed = max_span != float("inf")

    def window_of(items: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if not windowed:
            return np.zeros(len(items), np.int64)
        return np.floor_divide(starts[items], max_span).astype(np.int64)

    is_heavy = 2 * weights > capacity
    heavy = _HeavyBins.open(np.flatnonzero(is_heavy), window_of, weights, starts, ends)
    # Light items, heaviest first, placed one by one. Heavy bins were all created
    # before light ones, so at equal load (best fit) or whenever one has room
    # (first fit) a heavy bin wins.
    light_bins = _LightBins()
    best_fit = strategy == "best_fit"
    light = np.flatnonzero(~is_heavy)
    light = light[np.argsort(-weights[light], kind="stable")]
    light_windows = window_of(light)
    near = heavy.near(light_windows - windowed, light_windows + windowed)
    for i, w, heavy_near in zip(light.tolist(), light_windows.tolist(), near, strict=True):
        windows = (w - 1, w, w + 1) if windowed else (0,)
        item = _Placement(
            int(weights[i]), float(starts[i]), float(ends[i]), windows, capacity, max_span, best_fit
        )
        heavy_at = heavy.pick(weights, item, heavy_near)
        target = light_bins.pick(item) if heavy_at is None or best_fit else None
        if heavy_at is not None and (target is None or heavy.load[heavy_at] >= light_bins.loads[target]):
            heavy.join(heavy_at, i, item)
        else:
            light_bins.place(target, i, item, w)
    return heavy.bins(weights, singletons) + light_bins.bins(singletons)


class _HeavyBins:
    """One bin per heavy item, in arrays sorted by window; light items may join them."""

    def __init__(
        self,
        opened: npt.NDArray[np.int64],
        window: npt.NDArray[np.int64],
        weights: npt.NDArray[np.int64],
        starts: npt.NDArray[np.float64],
        ends: npt.NDArray[np.float64],
    ) -> None:
        self.opened, self.window = opened, window
        self.load = weights[opened]  # indexing by an array copies: these are ours to update
        self.hull_start, self.hull_end = starts[opened], ends[opened]  # the span of each bin's items
        self.joined: dict[int, list[int]] = {}  # a bin's first item -> light items placed in it

    @classmethod
    def open(
        cls,
        opened: npt.NDArray[np.int64],
        window_of: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]],
        weights: npt.NDArray[np.int64],
        starts: npt.NDArray[np.float64],
        ends: npt.NDArray[np.float64],
    ) -> _HeavyBins:
        window = window_of(opened)  # input order is already window order when sorted by start
        if np.any(window[1:] < window[:-1]):
            by_window = np.argsort(window, kind="stable")
            opened, window = opened[by_window], window[by_window]
        return cls(opened, window, weights, starts, ends)

    def near(self, lowest: npt.NDArray[np.int64], highest: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
        """Per item, the range of positions of the bins in windows `lowest`..`highest`."""
        first = np.searchsorted(self.window, lowest).tolist()
        last = np.searchsorted(self.window, highest + 1).tolist()
        return list(zip(first, last, strict=True))

    def pick(self, weights: npt.NDArray[np.int64], item: _Placement, near: tuple[int, int]) -> int | None:
        """Position (in the window-sorted arrays) of the bin the strategy picks among those
        `near` the item, or None."""
        weight, start, end, _, capacity, max_span, best_fit = item
        first, last = near
        if first == last:
            return None
        load = self.load[first:last]
        fits = load + weight <= capacity
        if max_span != float("inf"):
            # each bin's span once the item joins it
            joined_start = np.minimum(self.hull_start[first:last], start)
            fits &= np.maximum(self.hull_end[first:last], end) - joined_start <= max_span
        candidates = np.flatnonzero(fits)
        if len(candidates) == 0:
            return None
        if best_fit:
            candidates = candidates[load[candidates] == load[candidates].max()]
        # The earliest created: the heaviest first item, then the lowest index.
        items = self.opened[first + candidates]
        heaviest = weights[items] == weights[items].max()
        return int(first) + int(candidates[heaviest][np.argmin(items[heaviest])])

    def join(self, at: int, i: int, item: _Placement) -> None:
        self.load[at] += item.weight
        self.hull_start[at] = min(self.hull_start[at], item.start)
        self.hull_end[at] = max(self.hull_end[at], item.end)
        self.joined.setdefault(int(self.opened[at]), []).append(i)

    def bins(self, weights: npt.NDArray[np.int64], singletons: bool) -> list[list[int]]:
        firsts = self.opened if singletons else np.fromiter(self.joined, np.int64, len(self.joined))
        created = firsts[np.lexsort((firsts, -weights[firsts]))].tolist()  # the bins' creation order
        return [[first, *self.joined.get(first, ())] for first in created]


class _LightBins:
    """Bins opened by light items, indexed by their first item's window and sorted by load."""

    def __init__(self) -> None:
        self.members: list[list[int]] = []
        self.loads: list[int] = []
        self.hulls: list[tuple[float, float]] = []
        self.homes: list[int] = []
        self.by_window: dict[int, list[tuple[int, int]]] = defaultdict(list)  # window -> sorted (load, k)

    def pick(self, item: _Placement) -> int | None:
        """The bin the strategy picks for an item, or None when none has room."""
        weight, start, end, windows, capacity, max_span, best_fit = item
        loads, hulls = self.loads, self.hulls
        best: int | None = None
        for window in windows:
            entries = self.by_window.get(window)
            if not entries:
                continue
            room = bisect.bisect_right(entries, (capacity - weight, len(loads)))
            for load, k in reversed(entries[:room]) if best_fit else entries[:room]:
                if best_fit and best is not None and load < loads[best]:
                    break  # scanned fullest first: the rest of this window is no better
                if max(end, hulls[k][1]) - min(start, hulls[k][0]) > max_span:
                    continue
                if best is None or ((load, -k) > (loads[best], -best) if best_fit else k < best):
                    best = k
        return best

    def place(self, target: int | None, i: int, item: _Placement, window: int) -> None:
        """Put item `i` in bin `target`, or in a new bin homed at `window`."""
        if target is None:
            target = len(self.loads)
            self.members.append([])
            self.loads.append(0)
            self.hulls.append((item.start, item.end))
            self.homes.append(window)
        else:
            self.by_window[self.homes[target]].remove((self.loads[target], target))
        self.members[target].append(i)
        self.loads[target] += item.weight
        hull = self.hulls[target]
        self.hulls[target] = (min(item.start, hull[0]), max(item.end, hull[1]))
        bisect.insort(self.by_window[self.homes[target]], (self.loads[target], target))

    def bins(self, singletons: bool) -> list[list[int]]:
        return self.members if singletons else [b for b in self.members if len(b) > 1]

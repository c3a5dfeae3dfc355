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
    lo: float
    hi: float
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
        np.fromiter((lo for lo, _ in spans), np.float64, len(items)),
        np.fromiter((hi for _, hi in spans), np.float64, len(items)),
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
    is_heavy = 2 * weights > capacity
    windowed = max_span != float("inf")

    def window_of(items: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if not windowed:
            return np.zeros(len(items), np.int64)
        return np.floor_divide(starts[items], max_span).astype(np.int64)

    # Phase 1: heavy items, one bin each, kept in arrays sorted by window.
    opened = np.flatnonzero(is_heavy)  # input order; already window order when sorted by start
    heavy_window = window_of(opened)
    if np.any(heavy_window[1:] < heavy_window[:-1]):
        by_window = np.argsort(heavy_window, kind="stable")
        opened, heavy_window = opened[by_window], heavy_window[by_window]
    heavy_load = weights[opened]  # indexing by an array copies: these are ours to update
    heavy_lo = starts[opened]
    heavy_hi = ends[opened]
    joined: dict[int, list[int]] = {}  # heavy bin's first item -> light items placed in it

    # Phase 2: light items, heaviest first, placed one by one. Heavy bins were all
    # created before light ones, so at equal load (best fit) or whenever one has
    # room (first fit) a heavy bin wins.
    light_bins: list[list[int]] = []
    loads: list[int] = []
    hulls: list[tuple[float, float]] = []
    homes: list[int] = []
    light_by_window: dict[int, list[tuple[int, int]]] = defaultdict(list)  # window -> sorted (load, k)
    best_fit = strategy == "best_fit"
    light = np.flatnonzero(~is_heavy)
    light = light[np.argsort(-weights[light], kind="stable")]
    for i, w in zip(light.tolist(), window_of(light).tolist(), strict=True):
        weight, lo, hi = int(weights[i]), float(starts[i]), float(ends[i])
        windows = (w - 1, w, w + 1) if windowed else (0,)
        item = _Placement(weight, lo, hi, windows, capacity, max_span, best_fit)
        heavy_at = _pick_heavy(opened, weights, heavy_window, heavy_load, heavy_lo, heavy_hi, item)
        target = None
        if heavy_at is None or best_fit:
            target = _pick_light(light_by_window, loads, hulls, item)
        if heavy_at is not None and (target is None or heavy_load[heavy_at] >= loads[target]):
            heavy_load[heavy_at] += weight
            heavy_lo[heavy_at] = min(heavy_lo[heavy_at], lo)
            heavy_hi[heavy_at] = max(heavy_hi[heavy_at], hi)
            joined.setdefault(int(opened[heavy_at]), []).append(i)
            continue
        if target is None:
            target = len(loads)
            light_bins.append([])
            loads.append(0)
            hulls.append((lo, hi))
            homes.append(w)
        else:
            light_by_window[homes[target]].remove((loads[target], target))
        light_bins[target].append(i)
        loads[target] += weight
        hulls[target] = (min(lo, hulls[target][0]), max(hi, hulls[target][1]))
        bisect.insort(light_by_window[homes[target]], (loads[target], target))
    firsts = opened if singletons else np.fromiter(joined, np.int64, len(joined))
    created = firsts[np.lexsort((firsts, -weights[firsts]))].tolist()  # heavy bins' creation order
    heavy_bins = [[first, *joined.get(first, ())] for first in created]
    return heavy_bins + (light_bins if singletons else [b for b in light_bins if len(b) > 1])


def _pick_heavy(
    opened: npt.NDArray[np.int64],
    weights: npt.NDArray[np.int64],
    heavy_window: npt.NDArray[np.int64],
    heavy_load: npt.NDArray[np.int64],
    heavy_lo: npt.NDArray[np.float64],
    heavy_hi: npt.NDArray[np.float64],
    item: _Placement,
) -> int | None:
    """Position (in the window-sorted arrays) of the heavy bin the strategy picks, or None."""
    weight, lo, hi, windows, capacity, max_span, best_fit = item
    first, last = np.searchsorted(heavy_window, (windows[0], windows[-1] + 1)).tolist()
    if first == last:
        return None
    load = heavy_load[first:last]
    fits = load + weight <= capacity
    if max_span != float("inf"):
        fits &= np.maximum(heavy_hi[first:last], hi) - np.minimum(heavy_lo[first:last], lo) <= max_span
    candidates = np.flatnonzero(fits)
    if len(candidates) == 0:
        return None
    if best_fit:
        candidates = candidates[load[candidates] == load[candidates].max()]
    # The earliest created: the heaviest first item, then the lowest index.
    items = opened[first + candidates]
    heaviest = weights[items] == weights[items].max()
    return int(first) + int(candidates[heaviest][np.argmin(items[heaviest])])


def _pick_light(
    by_window: dict[int, list[tuple[int, int]]],
    loads: list[int],
    hulls: list[tuple[float, float]],
    item: _Placement,
) -> int | None:
    """The light bin the strategy picks for an item, or None when none has room."""
    weight, lo, hi, windows, capacity, max_span, best_fit = item
    best: int | None = None
    for window in windows:
        entries = by_window.get(window)
        if not entries:
            continue
        room = bisect.bisect_right(entries, (capacity - weight, len(loads)))
        for load, k in reversed(entries[:room]) if best_fit else entries[:room]:
            if best_fit and best is not None and load < loads[best]:
                break  # scanned fullest first: the rest of this window is no better
            if max(hi, hulls[k][1]) - min(lo, hulls[k][0]) > max_span:
                continue
            if best is None or ((load, -k) > (loads[best], -best) if best_fit else k < best):
                best = k
    return best

"""First-fit and best-fit bin packing over sizes in decreasing order (pure utility)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")
Strategy = Literal["first_fit", "best_fit"]


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
    an item at least as heavy), so every such item opens its own bin: that phase
    is vectorised. The lighter items are then placed one by one; bins are
    indexed by the `max_span`-wide window of their first item (a bin whose first
    item starts more than one window away cannot take the item), heavy bins in
    window-sorted arrays checked with numpy, light bins in lists sorted by load
    so only bins with room are looked at.
    """
    n = len(weights)
    order = np.argsort(-weights, kind="stable")  # heaviest first, ties in input order
    heavy = int(np.count_nonzero(2 * weights > capacity))
    windowed = max_span != float("inf")
    window = np.floor_divide(starts, max_span).astype(np.int64) if windowed else np.zeros(n, np.int64)

    # Phase 1: heavy items, one bin each, bin b holding item order[b].
    opened = order[:heavy]
    by_window = np.argsort(window[opened], kind="stable")  # heavy bins grouped by window
    heavy_window = window[opened][by_window].tolist()
    heavy_bin = by_window  # bin number of each position in the window-sorted arrays
    heavy_load = weights[opened][by_window].copy()
    heavy_lo = starts[opened][by_window].copy()
    heavy_hi = ends[opened][by_window].copy()
    joined: dict[int, list[int]] = {}  # heavy bin -> light items placed in it

    # Phase 2: light items, placed one by one. A pick is scored (load, -bin) for
    # best fit and (0, -bin) for first fit: the greater score wins.
    light_bins: list[list[int]] = []  # light bin k is bin heavy + k
    loads: list[int] = []
    hulls: list[tuple[float, float]] = []
    homes: list[int] = []
    light_by_window: dict[int, list[tuple[int, int]]] = defaultdict(list)  # window -> sorted (load, k)
    best_fit = strategy == "best_fit"
    for i in order[heavy:].tolist():
        weight, lo, hi, w = int(weights[i]), float(starts[i]), float(ends[i]), int(window[i])
        windows = (w - 1, w, w + 1) if windowed else (0,)
        heavy_at, heavy_score = -1, None
        first = bisect.bisect_left(heavy_window, windows[0])
        last = bisect.bisect_right(heavy_window, windows[-1])
        if first < last:
            load = heavy_load[first:last]
            fits = load + weight <= capacity
            if windowed:
                fits &= (
                    np.maximum(heavy_hi[first:last], hi) - np.minimum(heavy_lo[first:last], lo) <= max_span
                )
            candidates = np.flatnonzero(fits)
            if len(candidates):
                if best_fit:
                    candidates = candidates[load[candidates] == load[candidates].max()]
                heavy_at = first + int(candidates[np.argmin(heavy_bin[first + candidates])])
                heavy_score = (int(heavy_load[heavy_at]) if best_fit else 0, -int(heavy_bin[heavy_at]))
        light = None
        if heavy_score is None or best_fit:  # in first fit a heavy bin, opened earlier, always wins
            light = _pick_light(
                light_by_window, windows, loads, hulls, capacity, weight, lo, hi, max_span, best_fit
            )
        if heavy_score is not None and (
            light is None or heavy_score > (loads[light] if best_fit else 0, -heavy - light)
        ):
            heavy_load[heavy_at] += weight
            heavy_lo[heavy_at] = min(heavy_lo[heavy_at], lo)
            heavy_hi[heavy_at] = max(heavy_hi[heavy_at], hi)
            joined.setdefault(int(heavy_bin[heavy_at]), []).append(i)
            continue
        if light is None:
            light = len(loads)
            light_bins.append([])
            loads.append(0)
            hulls.append((lo, hi))
            homes.append(w)
        else:
            light_by_window[homes[light]].remove((loads[light], light))
        light_bins[light].append(i)
        loads[light] += weight
        hulls[light] = (min(lo, hulls[light][0]), max(hi, hulls[light][1]))
        bisect.insort(light_by_window[homes[light]], (loads[light], light))
    if singletons:
        heavy_bins = [[i, *joined.get(b, ())] for b, i in enumerate(opened.tolist())]
        return heavy_bins + light_bins
    return [[int(opened[b]), *joined[b]] for b in sorted(joined)] + [b for b in light_bins if len(b) > 1]


def _pick_light(
    by_window: dict[int, list[tuple[int, int]]],
    windows: tuple[int, ...],
    loads: list[int],
    hulls: list[tuple[float, float]],
    capacity: int,
    weight: int,
    lo: float,
    hi: float,
    max_span: float,
    best_fit: bool,
) -> int | None:
    """The light bin the strategy picks for an item, or None when none has room."""
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

"""First-fit and best-fit bin packing over sizes in decreasing order (pure utility)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

T = TypeVar("T")


def pack(
    items: Sequence[T],
    size: Callable[[T], int],
    capacity: int,
    strategy: Literal["first_fit", "best_fit"],
    span: Callable[[T], tuple[float, float]] | None = None,
    max_span: float = float("inf"),
) -> list[list[T]]:
    """Pack `items` into bins whose total size stays within `capacity`.

    Items are placed largest first. `first_fit` puts an item in the first bin
    (in creation order) with room; `best_fit` in the fullest bin with room. With
    `span`, each item also covers an interval (start, end) and a bin's hull may
    not exceed `max_span` (a time-width limit). An item larger than `capacity`
    gets a bin of its own. Ties are broken by input order: deterministic.

    Bins are indexed by the `max_span`-wide window of their first item (a bin
    whose first item starts more than one window away can never take the item)
    and kept sorted by load, so only bins with room are ever looked at: packing
    stays near-linear even with millions of items.
    """
    bins: list[list[T]] = []
    loads: list[int] = []
    hulls: list[tuple[float, float]] = []
    by_window: dict[int, list[tuple[int, int]]] = defaultdict(list)  # window -> sorted (load, bin)
    home: list[int] = []  # each bin's window
    windowed = span is not None and max_span != float("inf")
    order = sorted(range(len(items)), key=lambda i: (-size(items[i]), i))
    for i in order:
        item, weight = items[i], size(items[i])
        lo, hi = span(item) if span is not None else (0.0, 0.0)
        w = int(lo // max_span) if windowed else 0
        best: int | None = None
        for window in (w - 1, w, w + 1) if windowed else (0,):
            entries = by_window.get(window)
            if not entries:
                continue
            room = bisect.bisect_right(entries, (capacity - weight, len(bins)))
            for load, b in reversed(entries[:room]) if strategy == "best_fit" else entries[:room]:
                if strategy == "best_fit" and best is not None and load < loads[best]:
                    break  # scanned fullest first: the rest of this window is no better
                if span is not None and max(hi, hulls[b][1]) - min(lo, hulls[b][0]) > max_span:
                    continue
                if best is None or (
                    b < best if strategy == "first_fit" else (load, -b) > (loads[best], -best)
                ):
                    best = b
        if best is None:
            best = len(bins)
            bins.append([])
            loads.append(0)
            hulls.append((lo, hi))
            home.append(w)
        else:
            by_window[home[best]].remove((loads[best], best))
        bins[best].append(item)
        loads[best] += weight
        hulls[best] = (min(lo, hulls[best][0]), max(hi, hulls[best][1]))
        bisect.insort(by_window[home[best]], (loads[best], best))
    return bins

"""First-fit and best-fit bin packing over sizes in decreasing order (pure utility)."""

from __future__ import annotations

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
    with room; `best_fit` in the bin it fills the most. With `span`, each item
    also occupies an interval (start, end) and a bin's hull may not exceed
    `max_span` (a time-width limit). An item larger than `capacity` gets a bin of
    its own. Ties are broken by input order, so the result is deterministic.

    Bins are indexed by the window (`max_span`-wide) of their first item: a bin
    whose first item starts more than one window away can never take the item,
    so only neighbouring windows are searched and packing stays near-linear.
    """
    bins: list[list[T]] = []
    loads: list[int] = []
    hulls: list[tuple[float, float]] = []
    by_window: dict[int, list[int]] = defaultdict(list)
    windowed = span is not None and max_span != float("inf")
    order = sorted(range(len(items)), key=lambda i: (-size(items[i]), i))
    for i in order:
        item, weight = items[i], size(items[i])
        lo, hi = span(item) if span is not None else (0.0, 0.0)
        w = int(lo // max_span) if windowed else 0
        candidates: Sequence[int] = (
            sorted(by_window.get(w - 1, []) + by_window.get(w, []) + by_window.get(w + 1, []))
            if windowed
            else range(len(bins))
        )
        best: int | None = None
        for b in candidates:
            load = loads[b]
            if load + weight > capacity:
                continue
            if span is not None and max(hi, hulls[b][1]) - min(lo, hulls[b][0]) > max_span:
                continue
            if strategy == "first_fit":
                best = b
                break
            if best is None or load > loads[best]:
                best = b
        if best is None:
            by_window[w].append(len(bins))
            bins.append([item])
            loads.append(weight)
            hulls.append((lo, hi))
        else:
            bins[best].append(item)
            loads[best] += weight
            hulls[best] = (min(lo, hulls[best][0]), max(hi, hulls[best][1]))
    return bins

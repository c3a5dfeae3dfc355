"""First-fit and best-fit bin packing over sizes in decreasing order (pure utility)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

T = TypeVar("T")


def pack(
    items: Sequence[T],
    size: Callable[[T], int],
    capacity: int,
    strategy: Literal["first_fit", "best_fit"],
    fits: Callable[[list[T], T], bool] = lambda _bin, _item: True,
) -> list[list[T]]:
    """Pack `items` into bins whose total size stays within `capacity`.

    Items are placed largest first. `first_fit` puts an item in the first bin
    with room; `best_fit` in the bin it fills the most. `fits` adds any other
    constraint (e.g. a time-width limit). An item larger than `capacity` gets a
    bin of its own. Ties are broken by input order, so the result is deterministic.
    """
    bins: list[list[T]] = []
    loads: list[int] = []
    order = sorted(range(len(items)), key=lambda i: (-size(items[i]), i))
    for i in order:
        item, weight = items[i], size(items[i])
        best: int | None = None
        for b, load in enumerate(loads):
            if load + weight > capacity or not fits(bins[b], item):
                continue
            if strategy == "first_fit":
                best = b
                break
            if best is None or load > loads[best]:
                best = b
        if best is None:
            bins.append([item])
            loads.append(weight)
        else:
            bins[best].append(item)
            loads[best] += weight
    return bins

"""The order a table's rewritten segments are laid out in, so that each output file's min/max
statistics cover a narrow range of the columns queries filter on."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from compactor.config.units import COLUMN_NAME, Frozen


class SortConfig(Frozen):
    """How every merge that rewrites rows orders them (refresh and manual merges too)."""

    by: tuple[str, ...] = Field(min_length=1, max_length=8)
    """The columns, most significant first."""
    curve: Literal["linear", "zorder", "hilbert"] = "linear"
    """`linear` sorts by the columns in turn; `zorder` and `hilbert` order rows along that
    space-filling curve over 2 to 4 columns (Delta's multi-dimensional clustering), so a filter
    on any of them skips files."""

    @model_validator(mode="after")
    def _columns(self) -> SortConfig:
        for column in self.by:
            if re.fullmatch(COLUMN_NAME, column) is None:
                raise ValueError(f"sort.by: {column!r} is not a column name")
        if len(set(self.by)) != len(self.by):
            raise ValueError(f"sort.by names a column twice: {list(self.by)}")
        if self.curve != "linear" and not 2 <= len(self.by) <= 4:
            raise ValueError(
                f"sort.curve {self.curve} orders 2 to 4 columns, got {len(self.by)} ({list(self.by)}); "
                "use curve: linear for one column"
            )
        return self

    def describe(self) -> str:
        """How a merge result names the layout it applied: `zorder(customer_id,country)`."""
        return f"{self.curve}({','.join(self.by)})"


def by_column(column: str) -> SortConfig:
    """A linear order on one column (a time column, or refresh's `layout.sorted_column`)."""
    return SortConfig(by=(column,))


def describe(order: SortConfig | None) -> str | None:
    """How results and status name an order; None: rows stay as read."""
    return None if order is None else order.describe()

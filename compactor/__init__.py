"""Event-driven streaming compactor for Delta Lake segments.

The public API is importable from here: `from compactor import load_segment`. Its names are
resolved on first use, so `import compactor` stays cheap (no Spark until a loader is called).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from compactor.client.loader import (
        load_segment,
        load_sub_partition,
        new_segment_id,
        refresh_sub_partition,
        sample_rows,
    )

__all__ = [
    "__version__",
    "load_segment",
    "load_sub_partition",
    "new_segment_id",
    "refresh_sub_partition",
    "sample_rows",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'compactor' has no attribute {name!r}")
    value = getattr(import_module("compactor.client.loader"), name)  # every public name is a loader
    globals()[name] = value  # resolved once
    return value

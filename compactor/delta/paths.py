"""Where tables live and the columns every table has: the leaf of the Delta layer.

Every table lives at `<warehouse>/<table>`, partitioned by `segment_id`, so a
merge touches only its inputs' partitions and concurrent appends of new
segments never conflict with it.
"""

from __future__ import annotations

from pathlib import Path

from compactor.domain.segments import validate_table_name
from compactor.errors import CompactorError

SEGMENT_COLUMN = "segment_id"
TARGET_FILE_BYTES = 256 * 1024 * 1024  # a merge writes files of about this size


def table_path(warehouse: Path | str, table: str) -> Path:
    """The table's directory; refuses any name that would leave the warehouse."""
    root = Path(warehouse).resolve()
    path = (root / validate_table_name(table)).resolve()
    if path.parent != root:
        raise CompactorError(f"table {table!r} resolves to {path}, outside the warehouse {root}")
    return path


def list_tables(warehouse: Path | str) -> list[str]:
    """The Delta tables directly under the warehouse."""
    root = Path(warehouse)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "_delta_log").is_dir())

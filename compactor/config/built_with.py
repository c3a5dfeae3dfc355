"""What a segment is built with: the canonical record of a table's layout, stored in `built_with`.

Loaders write it, the refresh planner compares it and the refresh writer stamps it, so it lives
where all three may read it.
"""

from __future__ import annotations

import json

from compactor.config.layout import LayoutConfig


def layout_record(layout: LayoutConfig, config_version: int) -> str:
    """Canonical JSON of what a segment built now is built with (stored in `built_with`)."""
    return json.dumps(
        {
            "config_version": config_version,
            "time_column": layout.time_column,
            "bucket_seconds": layout.bucket_time_period.total_seconds(),
            "partitioning": layout.partitioning.model_dump() if layout.partitioning else None,
            "sorted_column": layout.sorted_column,
            "columns": {n: (c.type, c.multi_value) for n, c in sorted(layout.columns.items())},
            "encoding": layout.encoding,
            "compression": layout.compression,
        },
        sort_keys=True,
        separators=(",", ":"),
    )

"""Vocabulary of a segment's physical layout shared by the refresh planner and the Delta side:
what the index check found in a segment's files, and how refreshed segments are named."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

HIDDEN_COLUMNS = frozenset({"segment_id"})  # the compactor's own column, not part of a layout


@dataclass(frozen=True, slots=True)
class IndexFacts:
    """What the index check found in a segment's files and rows."""

    columns: Mapping[str, tuple[str, bool]]  # column -> (type, multi_value) in the files
    bucket_count: int  # distinct time buckets of bucket_time_period among the rows
    partition_count: int  # distinct value partitions among the rows (0 without partitioning)
    sorted: bool  # rows sorted by the layout's sorted column (True without one)
    encoding: str
    compression: str
    # distinct values of the table's sub-partition column in the rows, as text (None: no such column)
    sub_partition_values: frozenset[str] | None = None


def refresh_output_prefix(plan_id: str) -> str:
    """Every segment a refresh plan writes has an id starting with this (derived from the plan id,
    so a replay writes the same ids and Delta's txnAppId recognises it)."""
    return f"r-{plan_id[:16]}"

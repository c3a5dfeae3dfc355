"""SQL text for Delta predicates: segment id lists and typed sub-partition literals."""

from __future__ import annotations

from collections.abc import Iterable

from compactor.config.sub_partitions import SubPartitionConfig, parse_sub_partition_value
from compactor.domain.segments import validate_segment_id


def in_list(ids: Iterable[str]) -> str:
    """`'a', 'b'` for an IN list; ids are validated against a strict pattern (no quotes)."""
    return ", ".join(f"'{validate_segment_id(i)}'" for i in ids)


def sub_partition_literal(config: SubPartitionConfig, value: str) -> str:
    """A SQL literal of `value` in the sub-partition column's type."""
    parse_sub_partition_value(config.type, value)  # refuses anything that is not a value
    quoted = "'" + value.replace("'", "''") + "'"
    kind = {"integer": "int", "varchar": "string", "char": "string"}.get(config.type, config.type)
    return f"CAST({quoted} AS {kind})"

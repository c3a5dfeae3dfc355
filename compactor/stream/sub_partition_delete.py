"""An operator's request to delete a sub-partition value: the commit, then the catalog follows."""

from __future__ import annotations

import logging

from compactor.catalog.changes import CommitRecord
from compactor.domain.segments import SegmentState
from compactor.errors import CompactorError
from compactor.stream.runner import Runner

log = logging.getLogger(__name__)


def delete_value(runner: Runner, table: str, value: str) -> CommitRecord | None:
    """Delete `value`'s rows from every segment of `table` in one commit and fold the commit into
    the catalog; None when no segment holds the value.

    A segment whose value is still LOADING or REFRESHING refuses the request: the
    writer building it would put rows back, or fail, after the delete. A lost commit
    race is retried like a merge's.
    """
    config = runner.configs.for_table(table).sub_partition
    if config is None:
        raise CompactorError(f"table {table} declares no sub-partition column")
    segments = runner.catalog.segments(table)
    busy = [
        f"{s.id} ({s.sub_partition_state(value)})"
        for s in segments
        if s.sub_partition_state(value) not in (None, SegmentState.ONLINE)
    ]
    if busy:
        raise CompactorError(
            f"table {table}: {config.column} = {value!r} is being built in {', '.join(busy)}; "
            "ask again once it is ONLINE"
        )
    if not any(value in s.sub_partitions for s in segments):
        log.info("table %s: no segment holds %s = %r; nothing to delete", table, config.column, value)
        return None
    for attempt in runner.retry.retrying(runner.sleep):
        with attempt:
            record = runner.store.delete_sub_partition(table, config, value, runner.catalog.segments(table))
    runner.catalog.apply(record)
    log.info(
        "table %s: %s = %r deleted in version %d: %d segment(s) changed, %d left empty and removed",
        table,
        config.column,
        value,
        record.version,
        len(record.added),
        len(record.removed),
    )
    return record

"""The shard layout a job runs with: checked against the warehouse's record, recorded the first
time, and moved by `--reshard`.

A reshard, with every job of the warehouse stopped, (1) reads where each old shard's query had
got to in the topic (its checkpoint's last committed batch), (2) folds every shard's catalog
journal into the catalog table, (3) clears the checkpoints the new count will use, and (4)
records the new counts with those offsets. The new shards' queries start from the recorded
offsets, so no event is processed twice beyond what a restart replays, and none is skipped. A
crash before (4) leaves the old record: the reshard is simply run again.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from compactor.delta.files import HadoopFiles
from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
from compactor.delta.warehouse.shard_record import (
    ShardRecord,
    clear_checkpoints,
    committed_offsets,
    new_record,
    processed_offsets,
    read_record,
    record_uri,
    shard_checkpoint,
    write_record,
)
from compactor.errors import ShardCountMismatch
from compactor.kafka.shards import ShardLayout

log = logging.getLogger(__name__)


def settle_layout(
    files: HadoopFiles,
    catalog: DeltaCatalogStore,
    warehouse: Path | str,
    checkpoint: Path | str,
    layout: ShardLayout,
    reshard: bool,
    now: datetime,
) -> ShardRecord | None:
    """The record the job runs with (None: the warehouse's first layout, one job and the
    checkpoint location itself). ShardCountMismatch when the configured counts differ from the
    recorded ones and `reshard` is not asked for."""
    record = read_record(files, warehouse, layout.topic)
    wanted = (layout.shards, layout.partitions)
    if record is not None and (record.shards, record.partitions) == wanted:
        return record
    if record is None and layout.shards == 1:
        return None
    ran = record is not None or bool(
        committed_offsets(files, shard_checkpoint(checkpoint, None, 0), layout.topic)
    )
    if ran and not reshard:
        raise ShardCountMismatch(_mismatch(record, layout, record_uri(warehouse, layout.topic)))
    offsets = processed_offsets(files, checkpoint, record, layout.topic) if ran else {}
    catalog.fold_journals()
    clear_checkpoints(files, checkpoint, layout.shards)
    moved = new_record(layout.shards, layout.partitions, offsets, now)
    write_record(files, warehouse, layout.topic, moved)
    old = f"{record.shards} shard(s)" if record is not None else "one job"
    log.warning(
        "resharded %s from %s to %d shard(s) over %d partition(s); the new queries start at %s",
        layout.topic,
        old,
        layout.shards,
        layout.partitions,
        offsets or "the earliest offsets",
    )
    return moved


def _mismatch(record: ShardRecord | None, layout: ShardLayout, where: str) -> str:
    now = (
        f"{record.shards} shard(s) over {record.partitions} partition(s) (recorded in {where})"
        if record is not None
        else "1 shard (one job; no shard record yet)"
    )
    return (
        f"operations.shards is {layout.shards} over the {layout.partitions} partition(s) of {layout.topic}, "
        f"but this warehouse's jobs run with {now}; stop every job and start one with --reshard to change it"
    )

"""Each table's status and the shards, read from the warehouse while the job runs (what
`compactor status` prints and the console shows without a running job of its own): the catalog
the job saves, the tables' history, the shard record and the jobs' checkpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from compactor.config.sort import describe
from compactor.config.tables import ProjectConfig
from compactor.delta.files import HadoopFiles
from compactor.delta.log.reads import read_catalog
from compactor.delta.paths import warehouse_uri
from compactor.delta.spark_store import SparkTableStore
from compactor.delta.warehouse.shard_record import processed_offsets, read_record
from compactor.domain.columns import SegmentColumns
from compactor.domain.segments import Segment
from compactor.kafka.lease import group_owners, lease_group
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.shards import ShardLayout
from compactor.kafka.topics import end_offsets
from compactor.observe.status.shard_status import ShardStatus, shard_statuses
from compactor.observe.status.table_status import (
    DeletedRows,
    LogState,
    TableStatus,
    offline_health,
    table_status,
)
from compactor.rules.due import table_due
from compactor.rules.engine import evaluate
from compactor.rules.late_data import summary
from compactor.stream.runner import quarantine_error


def table_segments(spark: Any, warehouse: str, stored: Any, table: str) -> list[Segment]:
    """The table's segments from the job's saved catalog; a table the job has not seen yet, from
    the table's own history."""
    return list(stored.segments.get(table) or read_catalog(spark, warehouse, table).segments(table))


def table_report(
    spark: Any,
    warehouse: str,
    store: SparkTableStore,
    stored: Any,
    project: ProjectConfig,
    table: str,
    now: datetime,
) -> TableStatus:
    """One table's status: its segments, what is ready to merge, its last merges, its switch,
    failures, debt outlook, late data, next due time, layout, deleted rows and health."""
    segments = table_segments(spark, warehouse, stored, table)
    mark = stored.marks.get(table)
    settings = project.for_table(table)
    ready = evaluate(table, segments, settings, now, explain=False).ready
    merging, failures, debt = (mark.merging, mark.failures, mark.debt) if mark else (True, (), None)
    failures = tuple(f for f in failures if not f.running)  # merges begun are not failures
    cooling = [(f.key, f.until) for f in failures]
    due = table_due(SegmentColumns.of(segments), settings, now, cooling, project.operations.off_peak)
    deleted = DeletedRows.of(store.row_counts(table).values(), settings.purge_deleted_ratio)
    quarantine = quarantine_error(mark.quarantine)[0] if mark and mark.quarantine else None
    total = sum(s.bytes for s in segments)
    health = offline_health(merging, quarantine, ready, failures, deleted, total, settings.max_debt, now)
    return table_status(
        table,
        merging,
        segments,
        ready,
        store.history(table),
        failures,
        now,
        debt,
        summary(segments, settings.rules),
        due,
        describe(settings.layout_order),
        deleted,
        store.commit_path(table),
        health=health,
        key_index=(store.key_indexes.describe(table) or {}) if settings.upsert is not None else None,
        log=LogState(store.latest_version(table), store.last_checkpoint(table), settings.checkpoint_every),
    )


def shard_section(
    spark: Any,
    warehouse: str,
    topic: str,
    checkpoint: str,
    store: SparkTableStore,
    kafka: KafkaSettings | None,
) -> tuple[ShardLayout, list[ShardStatus]] | None:
    """The warehouse's shards as recorded, with each one's job and lag when `kafka` is given;
    None when the warehouse is not run in shards."""
    files = HadoopFiles(spark)
    record = read_record(files, warehouse, topic)
    if record is None or record.shards == 1:
        return None
    layout = ShardLayout(topic, record.shards, record.partitions)
    processed = processed_offsets(files, checkpoint, record, topic)
    owners: dict[int, str] = {}
    ends = None
    if kafka is not None:
        owners = group_owners(kafka, lease_group(kafka, warehouse_uri(warehouse), record.shards))
        ends = end_offsets(kafka, topic, range(record.partitions))
    return layout, shard_statuses(layout, owners, processed, ends, store.tables())

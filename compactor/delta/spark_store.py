"""The table store on Spark and Delta Lake: tables under one warehouse directory."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from compactor.catalog.changes import CommitRecord
from compactor.catalog.key_index import KeyColumns, KeyRow
from compactor.catalog.key_values import Ints
from compactor.config.layout import LayoutConfig, UpsertConfig
from compactor.config.rules import UPKEEP_POOL, VACUUM_POOL, RuleName
from compactor.config.sub_partitions import SubPartitionConfig
from compactor.config.tables import TableSettings
from compactor.config.vacuum import VacuumConfig
from compactor.delta.commit.conflicts import conflicts_as_commit_conflict
from compactor.delta.commit.log_upkeep import (
    commits_since_checkpoint,
    hold_checkpoint_interval,
    write_checkpoint,
)
from compactor.delta.commit.plan_transactions import PlanTransactionExpiry
from compactor.delta.features import direct_commit_refusal, refused_features
from compactor.delta.files import HadoopFiles
from compactor.delta.log import reads
from compactor.delta.log.commit_metadata import plan_marker
from compactor.delta.log.live_files import LiveFileIndex
from compactor.delta.log.reader import RECENT_COMMITS, CommitCache, DeltaLogReader
from compactor.delta.log.snapshot import table_protocol
from compactor.delta.paths import RESERVED, free_bytes, table_uri, warehouse_uri
from compactor.delta.rewrite.driver_merge import DRIVER_MERGE_MAX_BYTES
from compactor.delta.rewrite.index_check import index_facts
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.delta.rewrite.purge import purge_deleted_rows
from compactor.delta.rewrite.refresh import execute_refresh
from compactor.delta.rewrite.upsert import key_rows, key_rows_of_keys
from compactor.delta.store import LoadOrder, SnapshotWriter, StoredSnapshot, TableChanges, VacuumReport
from compactor.delta.table_ops import properties
from compactor.delta.table_ops.sub_partition_delete import delete_sub_partition
from compactor.delta.table_ops.vacuum import vacuum
from compactor.delta.warehouse.key_index_snapshots import KeyIndexSnapshots
from compactor.domain.certificate import IndexedWinners
from compactor.domain.layout import IndexFacts
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import RowCount, Segment
from compactor.errors import CompactorError, Fenced, LogGap

POOL_PROPERTY = "spark.scheduler.pool"
DESCRIPTION_PROPERTY = "spark.job.description"  # shown with the job in the UI and event log
JOB_GROUP_PROPERTY = "spark.jobGroup.id"
INTERRUPT_PROPERTY = "spark.job.interruptOnCancel"
# a commit's Spark jobs run in a group of their own: counted by the benchmarks, cancellable
MERGE_JOB_GROUP_PREFIX = "compactor-merge-"


log = logging.getLogger(__name__)


class SparkTableStore:
    """`TableStore` over `<warehouse>/<table>` Delta tables.

    `depth` is how many of the newest commit files the fast paths read before
    asking Delta itself.
    """

    def __init__(
        self,
        spark: SparkSession,
        warehouse: Path | str,
        depth: int = RECENT_COMMITS,
        write_tasks: int | None = None,
        driver_max_bytes: int = DRIVER_MERGE_MAX_BYTES,
        certify: bool = True,
    ) -> None:
        self.spark = spark
        self.warehouse = warehouse_uri(warehouse)
        self.files = HadoopFiles(spark)
        self.depth = depth
        self.write_tasks = write_tasks
        self.driver_max_bytes = driver_max_bytes
        self.certify = certify
        self._logs: dict[str, DeltaLogReader] = {}
        self._live: dict[str, LiveFileIndex] = {}
        self._merge_settings: dict[str, tuple[TableSettings, MergeSettings]] = {}  # table ->
        self._plan_ids = PlanTransactionExpiry(spark)
        self._commits = CommitCache()  # every table's log reader keeps its commits here
        self.key_indexes = KeyIndexSnapshots(self.files, self.warehouse)
        self._fenced = threading.Event()
        self._attempts: dict[str, threading.Event] = {}  # plan id -> its running attempt's cancel
        self._attempts_lock = threading.Lock()

    def log(self, table: str) -> DeltaLogReader:
        """The table's log reader, kept for the job's life: a commit is read once while the
        store's cache of commits holds it."""
        found = self._logs.get(table)
        if found is None:  # two threads may build one each: the first kept wins, both are right
            found = self._logs.setdefault(
                table,
                DeltaLogReader(self.files, table_uri(self.warehouse, table), table, self._commits),
            )
        return found

    def live_files(self, table: str) -> LiveFileIndex:
        """The table's live files, kept for the job's life and folded forward from its log (from
        Delta's own snapshot when the job cannot read the table's checkpoint)."""
        found = self._live.get(table)
        if found is None:
            found = self._live.setdefault(table, LiveFileIndex(self.log(table), self.files, self.spark))
        return found

    def tables(self, known: Collection[str] = ()) -> list[str]:
        """The warehouse's Delta tables: folders whose log holds a commit. Delta creates
        `_delta_log/` before the first commit file, so a table being born is not one yet; its
        first event finds it as a table new to a running job. The `known` ones (the catalog
        has a mark for them) are not looked into: one listing, whatever the warehouse's size."""
        names = self.files.list_names(self.warehouse)
        return sorted(
            n
            for n in names
            if n != RESERVED
            and (n in known or reads.has_commit(self.files, f"{self.warehouse}/{n}/_delta_log"))
        )

    def exists(self, table: str) -> bool:
        """Asked afresh of the table's log each time (`reads.table_exists`): a table being born
        when first asked about is found once its first commit lands."""
        return reads.table_exists(self.spark, self.warehouse, table, self.files)

    def history(self, table: str) -> list[CommitRecord]:
        """From the log's commit files while it holds every one (no Spark query: start-up reads
        each table new to the catalog); from Delta's history once cleanup removed the first."""
        log = self.log(table)
        if log.latest_version() >= 0:
            with contextlib.suppress(LogGap):
                return log.changes_since(-1).records
        return reads.read_commits(self.spark, self.warehouse, table)

    def changes_since(self, table: str, version: int) -> TableChanges:
        return self.log(table).changes_since(version)

    def row_counts(self, table: str) -> dict[str, RowCount]:
        return reads.segment_rows(self.spark, self.warehouse, table, self.files)

    def segments_with_rows(self, table: str, segment_ids: Sequence[str]) -> set[str]:
        return reads.segments_with_rows(self.spark, self.log(table), list(segment_ids), self.depth)

    def latest_version(self, table: str) -> int:
        return self.log(table).latest_version()

    def recorded_config(self, table: str) -> str | None:
        return properties.load_table_config(self.spark, self.warehouse, table, self.files)

    def record_config(self, table: str, settings_json: str) -> None:
        self._unfenced()
        properties.save_table_config(self.spark, self.warehouse, table, settings_json)

    def commit(
        self,
        plan: MergePlan,
        settings: TableSettings,
        load_order: LoadOrder | None = None,
        winners: IndexedWinners | None = None,
    ) -> Commit:
        """The plan's commit, run in its FAIR scheduler pool (bin-pack pools, CarbonData cores),
        its Spark jobs labelled with the table and plan and grouped under the plan, conflicts
        typed. A table found carrying per-plan transaction ids of earlier versions gets their
        retention (`plan_transactions`)."""
        label = f"compactor merge {plan.table} {plan.plan_id}"
        with (
            self._local(POOL_PROPERTY, settings.spark_pool(plan.rule, plan.pool)),
            self._local(DESCRIPTION_PROPERTY, label),
            self._local(JOB_GROUP_PROPERTY, MERGE_JOB_GROUP_PREFIX + plan.plan_id),
            self._local(INTERRUPT_PROPERTY, "true"),  # a cancelled merge's tasks are interrupted
            conflicts_as_commit_conflict(),
            self._attempt(plan.plan_id) as guard,
        ):
            committed = self._execute(plan, settings, load_order, winners, guard)
        try:  # bookkeeping after the commit: a failure here must not report a commit as failed
            live = self.live_files(plan.table)
            self._plan_ids.settle(plan.table, table_uri(self.warehouse, plan.table), live.legacy_app_ids())
        except Exception:
            log.warning(
                "table %s: after plan %s committed, its upkeep failed; tried next time",
                plan.table,
                plan.plan_id,
                exc_info=True,
            )
        return committed

    def fence(self) -> None:
        """The shard was lost: no write of this store from here on (commits, purges, deletes,
        VACUUM, snapshots, configs: each raises `Fenced`)."""
        self._fenced.set()

    def _unfenced(self) -> None:
        if self._fenced.is_set():
            raise Fenced("the shard's lease was lost: nothing is written for it any more")

    def cancel(self, plan_id: str) -> None:
        with self._attempts_lock:
            attempt = self._attempts.get(plan_id)
        if attempt is not None:
            attempt.set()
        self.spark.sparkContext.cancelJobGroup(MERGE_JOB_GROUP_PREFIX + plan_id)

    @contextlib.contextmanager
    def _attempt(self, plan_id: str) -> Iterator[Callable[[], None]]:
        """One attempt of a plan, and the guard called right before its Delta commit: none after
        the shard was lost, or once this attempt was cancelled as hung (a later attempt of the
        same plan is not)."""
        cancelled = threading.Event()
        with self._attempts_lock:
            self._attempts[plan_id] = cancelled

        def guard() -> None:
            if self._fenced.is_set():
                raise Fenced("the shard's lease was lost: nothing is committed for it any more")
            if cancelled.is_set():
                raise Fenced(f"plan {plan_id} was cancelled as hung: this attempt commits nothing")

        try:
            yield guard
        finally:
            with self._attempts_lock:
                if self._attempts.get(plan_id) is cancelled:
                    del self._attempts[plan_id]

    def _execute(
        self,
        plan: MergePlan,
        settings: TableSettings,
        load_order: LoadOrder | None,
        winners: IndexedWinners | None,
        guard: Callable[[], None],
    ) -> Commit:
        merge = self.merge_settings(plan.table, settings)
        live = self.live_files(plan.table)
        if plan.rule == RuleName.REFRESH:
            return execute_refresh(self.spark, self.warehouse, plan, merge, live, guard)
        return execute_merge(self.spark, self.warehouse, plan, merge, live, load_order, guard, winners)

    def merge_settings(self, table: str, settings: TableSettings) -> MergeSettings:
        """The table's settings as its commits use them: built once, again when they change."""
        kept = self._merge_settings.get(table)
        if kept is None or kept[0] is not settings:
            merge = MergeSettings.of(
                settings, self.merge_write_tasks(), self.driver_max_bytes, self.depth, self.certify
            )
            kept = self._merge_settings[table] = (settings, merge)
        return kept[1]

    def commit_path(self, table: str) -> str:
        """How the table's merges commit: "direct", or Delta's generic overwrite and why; a
        direct commit whose files come from Delta's snapshot (the job cannot read the table's
        checkpoint) says so and why."""
        reason = direct_commit_refusal(table_protocol(self.spark, table_uri(self.warehouse, table)))
        if reason is not None:
            return f"Delta's generic overwrite ({reason})"
        unread = self.live_files(table).unreadable()
        return "direct" if unread is None else f"direct, the table's files from Delta's snapshot ({unread})"

    def merge_write_tasks(self) -> int:
        """The tasks a merge writes with at most: as set, or `cores_but_one`."""
        return self.write_tasks if self.write_tasks is not None else cores_but_one(self.spark)

    def purge(self, segments: Sequence[Segment], certify: bool | None = None) -> None:
        self._unfenced()
        label = f"compactor purge {segments[0].table} {','.join(s.id for s in segments)}"
        certified = self.certify if certify is None else certify
        with self._local(DESCRIPTION_PROPERTY, label), conflicts_as_commit_conflict():
            purge_deleted_rows(
                self.spark, self.warehouse, segments, self.live_files(segments[0].table), certified
            )

    def committed_version(self, table: str, plan_id: str) -> int | None:
        found = self.log(table).find(plan_marker(plan_id), self.depth)
        return None if found is None else found.version

    def key_rows(
        self, table: str, upsert: UpsertConfig, segment_ids: Collection[str] | None
    ) -> Iterator[KeyRow | KeyColumns]:
        return key_rows(self.spark, self.warehouse, table, upsert, segment_ids)

    def key_rows_of_keys(
        self, table: str, upsert: UpsertConfig, keys: Ints, excluding: Collection[str]
    ) -> Iterator[KeyRow | KeyColumns]:
        return key_rows_of_keys(self.spark, self.warehouse, table, upsert, keys, excluding)

    def save_key_index(self, table: str, version: int, write: SnapshotWriter, keys: int) -> None:
        self._unfenced()
        self.key_indexes.save(table, version, write, keys)

    def load_key_index(self, table: str) -> StoredSnapshot | None:
        return self.key_indexes.load(table)

    def delete_sub_partition(
        self, table: str, config: SubPartitionConfig, value: str, segments: Sequence[Segment]
    ) -> CommitRecord:
        self._unfenced()
        with conflicts_as_commit_conflict():
            return delete_sub_partition(self.spark, self.warehouse, table, config, value, segments)

    def index_facts(
        self, table: str, segment: Segment, layout: LayoutConfig, sub_column: str | None = None
    ) -> IndexFacts:
        return index_facts(self.spark, self.warehouse, table, segment, layout, sub_column)

    def refusal(self, table: str) -> str | None:
        """From the table's newest protocol and metadata as its live files hold them: read from
        its log by the driver, as the table's first merge reads them anyway. Delta's snapshot
        would cost a Spark job on a version without a checksum (every load delta-rs writes), once
        per table on its first merge after a start. Every form the live files come from (the
        log's checkpoints and commits, or Delta's state when the driver cannot read them) holds
        both actions: a table without them is no Delta table, as Delta itself would say."""
        version = self.log(table).latest_version()
        live = self.live_files(table).at(version)
        if live.protocol is None or live.metadata is None:
            raise CompactorError(f"table {table}: its log at version {version} holds no protocol or metadata")
        refused = refused_features(live.protocol, live.metadata)
        return "; ".join(refused) if refused else None

    def last_checkpoint(self, table: str) -> int:
        log_uri = self.log(table).log_uri
        return commits_since_checkpoint(self.files, log_uri, -1)[1]

    def checkpoint(self, table: str) -> int:
        self._unfenced()
        with (
            self._local(POOL_PROPERTY, UPKEEP_POOL),
            self._local(DESCRIPTION_PROPERTY, f"compactor checkpoint {table}"),
        ):
            return write_checkpoint(self.spark, table_uri(self.warehouse, table))

    def hold_checkpoint_interval(self, table: str, held: bool) -> bool:
        self._unfenced()
        with self._local(POOL_PROPERTY, UPKEEP_POOL):
            return hold_checkpoint_interval(self.spark, table_uri(self.warehouse, table), held)

    def free_bytes(self, table: str) -> int | None:
        return free_bytes(table_uri(self.warehouse, table))

    def kept_commit_bytes(self) -> int:
        return self._commits.held

    def vacuum(self, table: str, config: VacuumConfig, dry_run: bool = False) -> VacuumReport:
        self._unfenced()
        with self._local(POOL_PROPERTY, VACUUM_POOL):
            return vacuum(self.spark, table_uri(self.warehouse, table), table, config, dry_run)

    @contextlib.contextmanager
    def _local(self, key: str, value: str | None) -> Iterator[None]:
        """A Spark local property for the jobs this thread submits (the FAIR pool, a job's
        description); each merge runs on its own worker thread, so each gets its own."""
        context = self.spark.sparkContext
        previous = context.getLocalProperty(key)
        if value:
            context.setLocalProperty(key, value)
        try:
            yield
        finally:
            if value:
                context.setLocalProperty(key, previous)  # type: ignore[arg-type]


def cores_but_one(spark: SparkSession) -> int:
    """Every core Spark has now (its default parallelism) but one, at least one: a big merge's
    long write tasks would otherwise hold every core, and the micro-batches and small merges
    would wait for them (Spark never takes a core back from a running task)."""
    return max(1, spark.sparkContext.defaultParallelism - 1)

"""The table store: everything the stream asks of the tables, as an interface.

The stream (admission, planning, runner, announcer) talks only to this
protocol, so its logic runs in unit tests against an in-memory store, and a
durable catalog or object-store tables fit behind it without touching the
stream. `spark_store.SparkTableStore` is the Spark + Delta implementation.

Errors: `commit` raises `CommitConflict` when another writer won the race (the
caller retries or re-plans) and `UnsupportedTableFeature` for a table it must
not rewrite; anything else is a failure of that plan.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, NamedTuple, Protocol

from compactor.catalog.changes import CommitRecord
from compactor.catalog.key_index import KeyRows
from compactor.catalog.key_values import Ints
from compactor.config.layout import LayoutConfig, UpsertConfig
from compactor.config.sub_partitions import SubPartitionConfig
from compactor.config.tables import TableSettings
from compactor.config.vacuum import VacuumConfig
from compactor.domain.certificate import IndexedWinners
from compactor.domain.layout import IndexFacts
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import RowCount, Segment

LoadOrder = Mapping[str, datetime]  # segment id -> when it was loaded


class StoredSnapshot(NamedTuple):
    """A table's key index snapshot as kept, with the table version it was taken at: `data` is a
    readable, seekable file holding its bytes (a spool on local disk, not memory), which the
    taker closes."""

    version: int
    data: BinaryIO


# writes a key index snapshot's bytes into the file it is given (`IndexSnapshot.write`)
SnapshotWriter = Callable[[BinaryIO], object]


@dataclass(frozen=True, slots=True)
class TableChanges:
    """What a table's log says happened after a version: our commits' records, the versions of
    commits someone else wrote that added or removed files, and the newest version."""

    records: list[CommitRecord]
    foreign: list[int]
    latest: int


@dataclass(frozen=True, slots=True)
class VacuumReport:
    """A VACUUM: with `dry_run`, the files it would delete; otherwise none are listed."""

    table: str
    dry_run: bool
    files: tuple[str, ...]


class TableStore(Protocol):
    def tables(self, known: Collection[str] = ()) -> list[str]:
        """Every table the warehouse holds (the `known` ones taken as tables without a look)."""

    def exists(self, table: str) -> bool:
        """Whether the table exists (a new table may appear while the job runs)."""

    def history(self, table: str) -> list[CommitRecord]:
        """Every compactor commit of the table the log still holds, oldest first (slow: for a
        table the catalog has never seen)."""

    def changes_since(self, table: str, version: int) -> TableChanges:
        """The table's commits after `version`; `LogGap` when the log no longer holds them all."""

    def row_counts(self, table: str) -> dict[str, RowCount]:
        """Rows per segment id with rows, visible and hidden by deletion vectors, as the table
        holds them now (from its file list, not its rows)."""

    def segments_with_rows(self, table: str, segment_ids: Sequence[str]) -> set[str]:
        """Which of these segments have rows now (cheap: answered from the newest commits)."""

    def latest_version(self, table: str) -> int:
        """The table's newest version (-1 for none)."""

    def recorded_config(self, table: str) -> str | None:
        """The table config recorded with the table (published with `config apply`), if any."""

    def record_config(self, table: str, settings_json: str) -> None:
        """Record a published table config with the table, so a restart keeps it."""

    def commit(
        self,
        plan: MergePlan,
        settings: TableSettings,
        load_order: LoadOrder | None = None,
        winners: IndexedWinners | None = None,
    ) -> Commit:
        """Execute a plan as ONE commit (idempotent: a replay returns the earlier commit).
        Upsert tables judge ties by `load_order` (segment id -> load time), and a merge of one is
        checked against `winners`, what its key index said the inputs win. Safe to call from
        several threads at once, for plans of different tables or disjoint plans of one.
        `Fenced` once `fence` was called, however far the commit had got."""

    def cancel(self, plan_id: str) -> None:
        """Stop a hung merge: its Spark jobs are cancelled, and its commit, if it would still
        come, raises `Fenced` instead."""

    def fence(self) -> None:
        """Commit nothing more: the shard these tables belong to was lost (a commit about to
        be made raises `Fenced` instead)."""

    def purge(self, segments: Sequence[Segment], certify: bool | None = None) -> None:
        """Rewrite the files of one table's segments without the rows deletion vectors hide, in
        one commit (`dataChange=false`) that the table's log records as ours; `CommitConflict`
        when a concurrent writer touched the same files. `certify`: the table's own
        `certify_merges` (None: the job's)."""

    def committed_version(self, table: str, plan_id: str) -> int | None:
        """The version at which the plan committed, looked up among the newest commits (None:
        not among them): tells the order of merges of one table that ran side by side."""

    def key_rows(self, table: str, upsert: UpsertConfig, segment_ids: Collection[str] | None) -> KeyRows:
        """Upsert tables: the rows of `segment_ids` (None: of the whole table) as the key
        index reads them: key hash, comparison value, row hash, segment."""

    def key_rows_of_keys(
        self, table: str, upsert: UpsertConfig, keys: Ints, excluding: Collection[str]
    ) -> KeyRows:
        """Upsert tables: the rows whose key hash is one of `keys`, in every segment but
        `excluding`, as `key_rows` gives them."""

    def save_key_index(self, table: str, version: int, write: SnapshotWriter, keys: int) -> None:
        """Keep the table's key index snapshot (`KeyIndex.snapshot`, of `keys` keys), taken at
        `version`: `write` puts its bytes into a file, never all of them in memory at once."""

    def load_key_index(self, table: str) -> StoredSnapshot | None:
        """The table's newest key index snapshot (None: it has none)."""

    def delete_sub_partition(
        self, table: str, config: SubPartitionConfig, value: str, segments: Sequence[Segment]
    ) -> CommitRecord:
        """Delete the value's rows from every segment in one commit; the commit as the catalog folds it."""

    def index_facts(
        self, table: str, segment: Segment, layout: LayoutConfig, sub_column: str | None = None
    ) -> IndexFacts:
        """Refresh: what the segment's files and rows hold."""

    def free_bytes(self, table: str) -> int | None:
        """Free space where the table's files go, when the file system says (None: unknown)."""

    def kept_commit_bytes(self) -> int:
        """Bytes of Delta commit text behind the parsed commits the store keeps for its tables."""

    def refusal(self, table: str) -> str | None:
        """Why no merge can rewrite the table (its Delta features), in one line; None: it can."""

    def last_checkpoint(self, table: str) -> int:
        """The version of the table's newest checkpoint (-1: none), from `_last_checkpoint`."""

    def checkpoint(self, table: str) -> int:
        """Write a checkpoint of the table's newest version (Delta's writer, and its log
        cleanup); the version checkpointed."""

    def hold_checkpoint_interval(self, table: str, held: bool) -> bool:
        """Raise the table's `delta.checkpointInterval` so that no commit lands on a checkpoint
        version (`held`), or give a held one back; True when the table was changed."""

    def vacuum(self, table: str, config: VacuumConfig, dry_run: bool = False) -> VacuumReport:
        """Delete (or, dry, list) the files no version inside the retention needs."""

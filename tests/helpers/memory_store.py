"""An in-memory `TableStore` for unit tests of the stream: tables, commits and scripted trouble.

Tables hold row counts per segment and a history of commit records, as a Delta
table would. A test scripts conflicts (optionally with a concurrent change) and
failures per plan, and reads back every commit call.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from compactor.catalog.changes import CommitRecord
from compactor.catalog.key_index import KeyRow
from compactor.catalog.key_values import Ints
from compactor.catalog.retired import RetiredFilter, RetiredSegment
from compactor.catalog.store import CatalogChanges, StoredCatalog, TableMark
from compactor.config.layout import LayoutConfig, UpsertConfig
from compactor.config.sub_partitions import SubPartitionConfig
from compactor.config.tables import TableSettings
from compactor.config.vacuum import VacuumConfig
from compactor.delta.store import LoadOrder, SnapshotWriter, StoredSnapshot, TableChanges, VacuumReport
from compactor.domain.certificate import IndexedWinners
from compactor.domain.layout import IndexFacts
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import RowCount, Segment
from compactor.errors import CommitConflict, Fenced, LogGap, TableNotFoundError


@dataclass
class InMemoryTableStore:
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # table -> segment id -> rows
    hidden: dict[str, dict[str, int]] = field(default_factory=dict)  # rows deletion vectors hide
    purges: list[str] = field(default_factory=list)  # segment ids, one per purge call
    purges_certified: dict[tuple[str, str], bool | None] = field(default_factory=dict)  # `certify` given
    commits: dict[str, list[CommitRecord]] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, int] = field(default_factory=dict)  # plan id -> conflicts before it commits
    always_conflicting: bool = False  # every commit loses the race, however often it is tried
    vacuums: list[tuple[str, timedelta, bool]] = field(default_factory=list)  # table, retention, dry run
    free: int | None = None  # free bytes on the warehouse's disk (None: not known, as on object stores)
    refused: dict[str, str] = field(default_factory=dict)  # table -> why no merge may rewrite it
    checkpoints: dict[str, int] = field(default_factory=dict)  # table -> its newest checkpoint's version
    checkpointed: list[tuple[str, int]] = field(default_factory=list)  # (table, version) written
    held_intervals: dict[str, bool] = field(default_factory=dict)  # table -> its interval held
    on_conflict: Callable[[MergePlan], None] | None = None  # what the concurrent writer did
    failures: dict[str, Exception] = field(default_factory=dict)  # plan id -> what its commit raises
    # plan id -> what its commit raises once it has committed (an answer lost, as in an outage)
    failures_after_commit: dict[str, Exception] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)  # plan ids, one per commit call
    cleaned: dict[str, set[int]] = field(default_factory=dict)  # versions log cleanup removed
    # merges run on worker threads: a commit whose plan a gate names waits for it (after writing
    # nothing, before committing), so a test holds a merge in flight as long as it likes
    gates: dict[str, threading.Event] = field(default_factory=dict)  # table or plan id -> gate
    # ... and one a plan waits for after its commit, before its worker reports
    after_gates: dict[str, threading.Event] = field(default_factory=dict)
    entered: list[str] = field(default_factory=list)  # plan ids, as each commit began
    winners: dict[str, IndexedWinners | None] = field(default_factory=dict)  # plan id -> what it was handed
    # upsert tables: each segment's rows as (key, comparison value, row hash); merges keep them all
    keyed: dict[str, dict[str, list[tuple[int, object, int]]]] = field(default_factory=dict)
    key_reads: list[tuple[str, tuple[str, ...] | None]] = field(default_factory=list)  # None: all
    # reads of some keys' rows: the table, the keys, the segments left out
    key_lookups: list[tuple[str, frozenset[int], tuple[str, ...]]] = field(default_factory=list)
    key_index_snapshots: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # version, bytes
    fenced: threading.Event = field(default_factory=threading.Event)  # fence(): commit nothing more
    cancelled: list[str] = field(default_factory=list)  # plan ids cancel() was called for
    index_checks: list[tuple[str, str]] = field(default_factory=list)  # (table, segment id) per check
    # as in the Spark store, a cancel fences the attempt running then, not a later one of the plan
    _attempts: dict[str, threading.Event] = field(default_factory=dict)  # plan id -> its cancel
    _lock: threading.RLock = field(default_factory=threading.RLock)

    # -- setting up ---------------------------------------------------------------

    def create(self, table: str) -> None:
        self.rows.setdefault(table, {})
        self.commits.setdefault(table, [])

    def load(self, segment: Segment) -> Segment:
        """A loader's append: the segment's rows and its commit record."""
        self.create(segment.table)
        self.rows[segment.table][segment.id] = segment.records
        self._record(segment.table, (segment,), (), None, "load")
        return segment

    def write_unrecorded(self, segment: Segment) -> None:
        """A producer's own append: the segment's rows, and no compactor metadata in the commit."""
        self.create(segment.table)
        self.rows[segment.table][segment.id] = segment.records
        self.commits[segment.table].append(
            CommitRecord(segment.table, self.latest_version(segment.table) + 1, (), (), op="foreign")
        )

    def drop(self, table: str, segment_id: str) -> None:
        """Someone else removed a segment's rows (a concurrent writer)."""
        if self.rows[table].pop(segment_id, None) is not None:
            self.commits[table].append(
                CommitRecord(table, self.latest_version(table) + 1, (), (), op="foreign")
            )

    def delete_rows(self, table: str, segment_id: str, count: int) -> None:
        """Another writer's DELETE with deletion vectors: `count` rows hidden, still in the files."""
        with self._lock:
            self.rows[table][segment_id] -= count
            hidden = self.hidden.setdefault(table, {})
            hidden[segment_id] = hidden.get(segment_id, 0) + count
            self.commits[table].append(
                CommitRecord(table, self.latest_version(table) + 1, (), (), op="foreign")
            )

    # -- the TableStore protocol ----------------------------------------------------

    def tables(self, known: Collection[str] = ()) -> list[str]:
        return sorted(self.rows)

    def exists(self, table: str) -> bool:
        return table in self.rows

    def history(self, table: str) -> list[CommitRecord]:
        if table not in self.commits:
            raise TableNotFoundError(table)
        return [c for c in self.commits[table] if c.added or c.removed]

    def changes_since(self, table: str, version: int) -> TableChanges:
        later = [c for c in self.commits[table] if c.version > version]
        if any(c.version in self.cleaned.get(table, set()) for c in later):
            raise LogGap(f"{table}: commits after {version} were cleaned up")
        ours = [c for c in later if c.op != "foreign"]
        foreign = [c.version for c in later if c.op == "foreign"]
        return TableChanges(ours, foreign, self.latest_version(table))

    def row_counts(self, table: str) -> dict[str, RowCount]:
        hidden = self.hidden.get(table, {})
        return {sid: RowCount(n, hidden.get(sid, 0)) for sid, n in self.rows[table].items()}

    def segments_with_rows(self, table: str, segment_ids: Sequence[str]) -> set[str]:
        return {sid for sid in segment_ids if self.rows.get(table, {}).get(sid)}

    def latest_version(self, table: str) -> int:
        return len(self.commits.get(table, [])) - 1

    def recorded_config(self, table: str) -> str | None:
        return self.configs.get(table)

    def record_config(self, table: str, settings_json: str) -> None:
        self.configs[table] = settings_json

    def commit(
        self,
        plan: MergePlan,
        settings: TableSettings,
        load_order: LoadOrder | None = None,
        winners: IndexedWinners | None = None,
    ) -> Commit:
        cancelled = threading.Event()
        with self._lock:
            self.entered.append(plan.plan_id)
            self.winners[plan.plan_id] = winners
            self._attempts[plan.plan_id] = cancelled
        try:
            gate = self.gates.get(plan.plan_id) or self.gates.get(plan.table)
            if gate is not None and not gate.wait(timeout=30):
                raise TimeoutError(f"gate for plan {plan.plan_id} never opened")
            with self._lock:
                if self.fenced.is_set():
                    raise Fenced(f"plan {plan.plan_id}: the store was fenced before its commit")
                if cancelled.is_set():
                    raise Fenced(f"plan {plan.plan_id} was cancelled: this attempt commits nothing")
                done = self._commit(plan)
        finally:
            with self._lock:
                if self._attempts.get(plan.plan_id) is cancelled:
                    del self._attempts[plan.plan_id]
        after = self.after_gates.get(plan.plan_id)
        if after is not None and not after.wait(timeout=30):
            raise TimeoutError(f"after-commit gate for plan {plan.plan_id} never opened")
        if plan.plan_id in self.failures_after_commit:
            raise self.failures_after_commit.pop(plan.plan_id)
        return done

    def _commit(self, plan: MergePlan) -> Commit:
        self.calls.append(plan.plan_id)
        done = next((c for c in self.commits[plan.table] if c.plan_id == plan.plan_id), None)
        if done is not None:
            return Commit(done.version, done.added, sum(s.records for s in done.added), 0, already_done=True)
        if self.always_conflicting or self.conflicts.get(plan.plan_id, 0) > 0:
            self.conflicts[plan.plan_id] = self.conflicts.get(plan.plan_id, 1) - 1
            if self.on_conflict is not None:
                self.on_conflict(plan)
            raise CommitConflict(f"ConcurrentAppendException: files were added under plan {plan.plan_id}")
        if plan.plan_id in self.failures:
            raise self.failures[plan.plan_id]
        table = self.rows[plan.table]
        records = sum(table.pop(sid, 0) for sid in plan.input_ids)
        for sid in plan.input_ids:  # a merge rewrites its inputs' rows: nothing stays hidden
            self.hidden.get(plan.table, {}).pop(sid, None)
        output = replace(plan.output, records=records, bytes=records * 10)
        table[output.id] = records
        if plan.table in self.keyed:
            keyed = self.keyed[plan.table]
            keyed[output.id] = [row for sid in plan.input_ids for row in keyed.pop(sid, [])]
        version = self._record(plan.table, (output,), plan.input_ids, plan, "merge")
        return Commit(
            version,
            (output,),
            records,
            output.bytes,
            duration_ms=3,
            data_change=False,
            write_ms=2,
            commit_ms=1,
        )

    def purge(self, segments: Sequence[Segment], certify: bool | None = None) -> None:
        with self._lock:
            self.purges.extend(s.id for s in segments)
            self.purges_certified.update(((s.table, s.id), certify) for s in segments)
            failure = next((self.failures[s.id] for s in segments if s.id in self.failures), None)
            if failure is not None:
                raise failure
            table = segments[0].table
            hidden = self.hidden.get(table, {})
            purged = tuple(
                replace(s, records=self.rows[table][s.id], deleted=0) for s in segments if hidden.pop(s.id, 0)
            )
            if purged:
                self._record(table, purged, (), None, "purge")

    def fence(self) -> None:
        self.fenced.set()

    def cancel(self, plan_id: str) -> None:
        with self._lock:
            self.cancelled.append(plan_id)
            attempt = self._attempts.get(plan_id)
            if attempt is not None:
                attempt.set()

    def committed_version(self, table: str, plan_id: str) -> int | None:
        with self._lock:
            return next((c.version for c in self.commits.get(table, []) if c.plan_id == plan_id), None)

    def key_rows(self, table: str, upsert: UpsertConfig, segment_ids: Collection[str] | None) -> list[KeyRow]:
        with self._lock:
            self.key_reads.append((table, None if segment_ids is None else tuple(sorted(segment_ids))))
            keyed = self.keyed.get(table, {})
            wanted = keyed if segment_ids is None else {sid: keyed.get(sid, []) for sid in segment_ids}
            return [KeyRow(k, v, h, sid) for sid, rows in wanted.items() for k, v, h in rows]

    def key_rows_of_keys(
        self, table: str, upsert: UpsertConfig, keys: Ints, excluding: Collection[str]
    ) -> list[KeyRow]:
        with self._lock:
            wanted = set(keys.tolist())
            self.key_lookups.append((table, frozenset(wanted), tuple(sorted(excluding))))
            keyed = self.keyed.get(table, {})
            return [
                KeyRow(k, v, h, sid)
                for sid, rows in keyed.items()
                if sid not in excluding
                for k, v, h in rows
                if k in wanted
            ]

    def save_key_index(self, table: str, version: int, write: SnapshotWriter, keys: int = 0) -> None:
        out = io.BytesIO()
        write(out)
        with self._lock:
            self.key_index_snapshots[table] = (version, out.getvalue())

    def load_key_index(self, table: str) -> StoredSnapshot | None:
        with self._lock:
            kept = self.key_index_snapshots.get(table)
        return None if kept is None else StoredSnapshot(kept[0], io.BytesIO(kept[1]))

    def delete_sub_partition(
        self, table: str, config: SubPartitionConfig, value: str, segments: Sequence[Segment]
    ) -> CommitRecord:
        """A segment's rows are spread evenly over its sub-partition values here."""
        if self.always_conflicting:
            raise CommitConflict("ConcurrentAppendException: a load of the value was appended")
        holders = [s for s in segments if value in s.sub_partitions]
        emptied = tuple(s.id for s in holders if s.sub_partitions == {value})
        kept = []
        for s in holders:
            rows = self.rows[table].pop(s.id, 0)
            if s.id not in emptied:
                left = rows - rows // len(s.sub_partitions)
                self.rows[table][s.id] = left
                kept.append(replace(s, sub_partitions=s.sub_partitions - {value}, records=left))
        version = self._record(table, tuple(kept), emptied, None, "sub_partition_delete")
        return self.commits[table][version]

    def index_facts(
        self, table: str, segment: Segment, layout: LayoutConfig, sub_column: str | None = None
    ) -> IndexFacts:
        """Files as `layout` wants them (no drift): refresh merges only small segments."""
        with self._lock:
            self.index_checks.append((table, segment.id))
        return IndexFacts(
            {name: (c.type, c.multi_value) for name, c in layout.columns.items()},
            bucket_count=1,
            partition_count=1 if layout.partitioning else 0,
            sorted=True,
            encoding=layout.encoding,
            compression=layout.compression,
            sub_partition_values=segment.sub_partitions if sub_column else None,
        )

    def free_bytes(self, table: str) -> int | None:
        return self.free

    def kept_commit_bytes(self) -> int:
        return 0  # no Delta log here

    def refusal(self, table: str) -> str | None:
        return self.refused.get(table)

    def last_checkpoint(self, table: str) -> int:
        return self.checkpoints.get(table, -1)

    def checkpoint(self, table: str) -> int:
        version = self.latest_version(table)
        self.checkpoints[table] = version
        self.checkpointed.append((table, version))
        return version

    def hold_checkpoint_interval(self, table: str, held: bool) -> bool:
        changed = self.held_intervals.get(table, False) != held
        self.held_intervals[table] = held
        return changed

    def vacuum(self, table: str, config: VacuumConfig, dry_run: bool = False) -> VacuumReport:
        self.vacuums.append((table, config.retention, dry_run))
        return VacuumReport(table, dry_run, ())

    def _record(
        self,
        table: str,
        added: tuple[Segment, ...],
        removed: tuple[str, ...],
        plan: MergePlan | None,
        op: str,
    ) -> int:
        version = self.latest_version(table) + 1
        record = CommitRecord(
            table, version, added, removed, plan.plan_id if plan else None, op, {},
            plan.rule if plan else None, plan.level if plan else None, plan.pool if plan else None,
            data_change=op != "merge",
        )  # fmt: skip
        self.commits[table].append(record)
        return version


@dataclass
class RecordingPublisher:
    """A `Publisher` that keeps what it was sent; it can be told to fail like a lost broker."""

    sent: list[tuple[str, str, bytes, Sequence[tuple[str, bytes]] | None]] = field(default_factory=list)
    fail: Exception | None = None

    def send_all(
        self, messages: Sequence[tuple[str, str, bytes, Sequence[tuple[str, bytes]] | None]]
    ) -> None:
        if self.fail is not None:
            raise self.fail
        self.sent.extend(messages)

    def on(self, topic: str) -> list[tuple[str, str, bytes, Sequence[tuple[str, bytes]] | None]]:
        return [m for m in self.sent if m[0] == topic]


@dataclass
class InMemoryCatalogStore:
    """A `CatalogStore` that keeps what was saved, folded latest-wins as the Delta one is."""

    live: dict[str, dict[str, Segment]] = field(default_factory=dict)
    marks: dict[str, TableMark] = field(default_factory=dict)
    retired_rows: dict[tuple[str, str], RetiredSegment] = field(default_factory=dict)
    upkeeps: int = 0
    saves: int = 0

    def load(self) -> StoredCatalog:
        return StoredCatalog({t: list(s.values()) for t, s in self.live.items()}, dict(self.marks))

    def save(self, changes: CatalogChanges) -> None:
        if not changes:
            return
        self.saves += 1
        for (table, sid), segment in changes.live.items():
            if segment is None:
                self.live.get(table, {}).pop(sid, None)
            else:
                self.live.setdefault(table, {})[sid] = segment
        for r in changes.retired:
            self.retired_rows[(r.table, r.segment_id)] = r
        for table, mark in changes.marks.items():  # a saved filter is a copy, as bytes on disk are
            self.marks[table] = replace(mark, retired=RetiredFilter.from_bytes(mark.retired.to_bytes()))

    def retired(self, table: str, segment_ids: Sequence[str]) -> dict[str, RetiredSegment]:
        return {
            sid: self.retired_rows[(table, sid)] for sid in segment_ids if (table, sid) in self.retired_rows
        }

    def upkeep(self) -> None:
        self.upkeeps += 1

    def merged_by(self, table: str, plan_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for (of, sid), record in self.retired_rows.items():
            if of == table and record.retired_by is not None and record.retired_by in plan_ids:
                found.setdefault(record.retired_by, set()).add(sid)
        return found


class InMemoryFiles:
    """What the job's small state files need of `HadoopFiles` (the lease's and outages' logs), in a dict."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def write_text(self, uri: str, text: str) -> None:
        self.texts[uri] = text

    def read_text(self, uri: str) -> str | None:
        return self.texts.get(uri)

    def list_names(self, uri: str) -> list[str]:
        return [u.removeprefix(uri + "/") for u in self.texts if u.startswith(uri + "/")]

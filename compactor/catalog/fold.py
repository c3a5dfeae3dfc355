"""The catalog: each table's current segments, one `apply(change)` fold over what happened.

Truth lives in Delta: the executor records every load and merge in the commit's
metadata, and `SegmentCatalog.from_commits` rebuilds this view from the table's
history. This module is pure; reading the history is the Delta layer's job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import singledispatchmethod

from compactor.catalog.changes import (
    Change,
    CommitRecord,
    PlanApplied,
    SegmentAdded,
    SegmentsGone,
    SegmentUpdated,
    TableReloaded,
)
from compactor.catalog.failures import Failure, noted
from compactor.catalog.retired import RETIRED_KEPT, Newest, RetiredFilter, RetiredSegment
from compactor.catalog.store import CatalogChanges, StoredCatalog, TableMark
from compactor.domain.columns import SegmentColumns, TableSegments
from compactor.domain.plans import MergePlan
from compactor.domain.segment_set import arrives_new, updates
from compactor.domain.segments import RowCount, Segment

log = logging.getLogger(__name__)

# The newest executed plan ids the catalog keeps in memory, over all tables (about 200 bytes
# each: 3 MB). Nothing needs older ones from memory: a plan folded twice is told by its
# inputs no longer being live, and a replayed plan's commit is found in the table's log by its
# id (`delta.reads.committed`).
PLANS_KEPT = 16_384
# plans reported FAILED whose commit may yet turn up in the log (an answer lost in an outage, a
# commit that beat its cancellation), newest kept; this process's memory only
OWED_KEPT = 4_096


@dataclass(frozen=True, slots=True)
class ExecutedPlan:
    """A plan as its Delta commit recorded it: enough to announce its result again."""

    version: int
    plan: MergePlan
    outputs: tuple[Segment, ...]
    data_change: bool = True


@dataclass
class SegmentCatalog:
    """Current segments per table; applying the same change twice is a no-op.

    Besides the live segments it keeps, per table, the data-table version it has
    folded up to, a filter of retired ids, the newest records of what it retired and
    of the plans it executed (`RETIRED_KEPT`, `PLANS_KEPT` over all tables: older
    ones are the durable store's), the executed plans not yet announced, and a
    journal of changes not yet saved to the durable store.
    """

    _tables: dict[str, TableSegments] = field(default_factory=dict)
    _executed: Newest[int] = field(default_factory=lambda: Newest(PLANS_KEPT))  # plan id -> version
    # ids merged away: the newest records exactly, and every id as a filter for all time
    _retired: Newest[RetiredSegment] = field(default_factory=lambda: Newest(RETIRED_KEPT))
    _filters: dict[str, RetiredFilter] = field(default_factory=dict)
    _versions: dict[str, int] = field(default_factory=dict)
    _committed: dict[str, int] = field(default_factory=dict)  # the job's newest commit per table
    _announced: dict[str, int] = field(default_factory=dict)
    _configs: dict[str, str] = field(default_factory=dict)  # published table configs (JSON)
    _merging_off: set[str] = field(default_factory=set)  # tables an operator disabled
    _failures: dict[str, tuple[Failure, ...]] = field(default_factory=dict)
    _debts: dict[str, str] = field(default_factory=dict)  # the job's last debt outlook per table (JSON)
    _quarantine: dict[str, str] = field(default_factory=dict)  # table -> why its merges are held
    # the plans the tables' commits executed, filled from commits, each until it is announced
    _history: dict[str, list[ExecutedPlan]] = field(default_factory=dict)
    _owed: dict[tuple[str, str], None] = field(default_factory=dict)  # (table, plan id), oldest first
    # versions of merges the last run folded and did not announce: read again (`recall`)
    _to_recall: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _journal: CatalogChanges = field(default_factory=CatalogChanges)

    # -- queries ----------------------------------------------------------------

    @property
    def table_names(self) -> list[str]:
        return list(self._tables)

    @property
    def table_count(self) -> int:
        return len(self._tables)

    def segments(self, table: str) -> list[Segment]:
        return list(self._tables.get(table, {}).values())

    def live(self, table: str) -> TableSegments:
        """The table's current segments by id, with their columns: read only, but for the
        invalid-row counts an upsert table's key index notes (no part of the catalog's record)."""
        return self._tables.get(table) or TableSegments()

    def columns(self, table: str) -> SegmentColumns:
        """The table's segments as columns for the planners (valid until the table changes)."""
        known = self._tables.get(table)
        return (known if known is not None else TableSegments()).columns()

    def get(self, table: str, segment_id: str) -> Segment | None:
        known = self._tables.get(table)
        return None if known is None else known.get(segment_id)

    def knows(self, table: str, segment_id: str) -> bool:
        """True for a current segment and for one this process merged away lately (see `retired`)."""
        return segment_id in self._tables.get(table, {}) or self.retired(table, segment_id)

    def retired(self, table: str, segment_id: str) -> bool:
        """True for a segment this process merged away among its newest `RETIRED_KEPT`
        retirements; an older one is the store's to tell (`may_be_retired` says when to ask)."""
        return self._retired.has(table, segment_id)

    def retired_record(self, table: str, segment_id: str) -> RetiredSegment | None:
        """The record of a segment `retired` knows (None: ask the store, if `may_be_retired`)."""
        return self._retired.get(table, segment_id)

    def may_be_retired(self, table: str, segment_id: str) -> bool:
        """False when the id was certainly never retired; True when it may have been (ask the store)."""
        return self.retired(table, segment_id) or self._filter(table).might_contain(segment_id)

    def retired_ids(self, table: str) -> frozenset[str]:
        """The ids of the table's records `retired` knows."""
        return self._retired.keys(table)

    def retired_records(self, table: str) -> tuple[RetiredSegment, ...]:
        """The table's records `retired` knows."""
        return tuple(self._retired.values(table))

    def version(self, table: str) -> int | None:
        """The data-table version every commit up to which is folded in (None: not known)."""
        return self._versions.get(table)

    def versions(self) -> dict[str, int]:
        """Every table's `version`, as one copy: safe to take without the job's lock (a dict's
        copy is one step under the GIL), for a reader that only needs a recent view."""
        return self._versions.copy()

    def newest_versions(self) -> dict[str, int]:
        """Every table's newest version known to exist: its `version`, or a later commit of the
        job's own (a merge) that the fold has not reached yet. A copy, safe without the job's
        lock. The log's maintainer counts from it: the fold mark alone lags a table whose merges
        outnumber its loads by every merge since the last load."""
        newest = self._versions.copy()
        for table, version in self._committed.copy().items():
            if version > newest.get(table, version):
                newest[table] = version
        return newest

    def announced(self, table: str) -> int | None:
        """The newest version whose merge events were acknowledged (None: never recorded)."""
        return self._announced.get(table)

    def was_executed(self, table: str, plan_id: str) -> bool:
        """True for a plan among the newest `PLANS_KEPT` this process applied or folded; an older
        one's commit is found in the table's log by its id."""
        return self._executed.has(table, plan_id)

    def executed_plans(self, table: str) -> list[ExecutedPlan]:
        """The plans the table's folded commits executed and its announcements have not yet
        passed (see `mark_announced`), or that were reported failed (`owe`), oldest first."""
        return list(self._history.get(table, []))

    def owe(self, table: str, plan_id: str) -> None:
        """The plan was reported FAILED, yet its commit may have landed: should a fold find it,
        it is kept for announcing whatever the announced version says (see `owes`)."""
        self._owed.pop((table, plan_id), None)
        self._owed[(table, plan_id)] = None
        while len(self._owed) > OWED_KEPT:
            del self._owed[next(iter(self._owed))]

    def owes(self, table: str, plan_id: str) -> bool:
        return (table, plan_id) in self._owed

    def settle(self, table: str, plan_id: str) -> None:
        """The plan's success is announced: nothing is owed for it any more."""
        self._owed.pop((table, plan_id), None)

    # -- the fold ---------------------------------------------------------------

    @singledispatchmethod
    def apply(self, change: Change) -> bool:
        """Fold one change in; True when it changed the catalog."""
        raise TypeError(f"not a catalog change: {change!r}")

    @apply.register
    def _(self, change: SegmentAdded) -> bool:
        segment = change.segment
        if self.retired(segment.table, segment.id):
            return False
        if not arrives_new(self._table(segment.table).get(segment.id), segment):
            return False
        self._tables[segment.table][segment.id] = segment
        self._journal.live[(segment.table, segment.id)] = segment
        return True

    @apply.register
    def _(self, change: SegmentUpdated) -> bool:
        segment = change.segment
        if not updates(self.get(segment.table, segment.id), segment):
            return False
        self._tables[segment.table][segment.id] = segment
        self._journal.live[(segment.table, segment.id)] = segment
        return True

    @apply.register
    def _(self, change: PlanApplied) -> bool:
        plan = change.plan
        table = self._table(plan.table)
        if self._applied(plan, change.outputs):
            return False
        self._replace(
            plan.table,
            [table.get(sid) or s for sid, s in zip(plan.input_ids, plan.inputs, strict=True)],
            change.outputs,
            plan.plan_id,
        )
        self._executed.set(plan.table, plan.plan_id, change.version if change.version is not None else -1)
        if change.version is not None and change.version > self._committed.get(plan.table, -1):
            self._committed[plan.table] = change.version
        return True

    def _applied(self, plan: MergePlan, outputs: Iterable[Segment]) -> bool:
        """Is the plan's effect in the catalog already (its commit folded, or the plan applied)?
        Its inputs left and its outputs came: known by the segments, not by remembering the plan
        id, which the catalog keeps only for a while. An output merged away again since counts
        as come."""
        table = self._table(plan.table)
        return not any(sid in table for sid in plan.input_ids) and all(
            o.id in table or self.may_be_retired(plan.table, o.id) for o in outputs
        )

    @apply.register
    def _(self, change: SegmentsGone) -> bool:
        known = self._table(change.table)
        gone = change.segment_ids & set(known)
        for sid in gone:
            log.warning("table %s: segment %s is in the catalog but not in Delta; dropped", change.table, sid)
            del known[sid]
            self._journal.live[(change.table, sid)] = None
        return bool(gone)

    @apply.register
    def _(self, change: TableReloaded) -> bool:
        known = self._table(change.table)
        for segment in change.segments:
            known[segment.id] = segment  # Delta's record wins over what events told us
            self._journal.live[(change.table, segment.id)] = segment
        for retired in change.retired:
            if retired.segment_id not in known:
                self._retired.set(change.table, retired.segment_id, retired)
                self._filter(change.table).add(retired.segment_id)
        return True

    @apply.register
    def _(self, record: CommitRecord) -> bool:
        """One commit of the table's Delta history."""
        table = record.table
        segments = self._table(table)
        inputs = tuple(segments.get(sid) or _unrecorded(sid, table, record) for sid in record.removed)
        sized = [record.sized(segment, segments.get(segment.id)) for segment in record.added]
        unknown = {sid for sid in record.removed if sid not in segments}
        self._replace(table, list(inputs), sized, record.plan_id, unknown)
        self.advance(table, record.version)
        if not record.plan_id:
            return True
        self._executed.set(table, record.plan_id, record.version)
        outputs = tuple(segments[s.id] for s in record.added)
        owed = self.owes(table, record.plan_id)
        if inputs and outputs and (record.version > self._announced.get(table, -2) or owed):
            self._remember(record, inputs, outputs)
        return True

    def _remember(
        self, record: CommitRecord, inputs: tuple[Segment, ...], outputs: tuple[Segment, ...]
    ) -> None:
        """A merge commit folded and not announced yet: kept until it is, its version with the mark."""
        table = record.table
        plan = MergePlan(
            str(record.plan_id),
            table,
            record.rule or record.op,
            inputs,
            outputs[0],
            record.level,
            record.pool,
        )
        self._history.setdefault(table, []).append(
            ExecutedPlan(record.version, plan, outputs, record.data_change)
        )
        self._journal.marks[table] = self._mark(table)

    def to_recall(self, table: str) -> tuple[int, ...]:
        """Versions of merges the last run folded and did not announce (asked once: then forgotten)."""
        return self._to_recall.pop(table, ())

    def recall(self, record: CommitRecord) -> None:
        """A merge the last run folded and did not announce, read again from the log: kept for
        `announce_unannounced` (its effect on the segments is in the catalog already)."""
        table = record.table
        if not record.plan_id or record.version <= self._announced.get(table, -2):
            return
        if any(e.plan.plan_id == record.plan_id for e in self._history.get(table, ())):
            return
        segments = self._table(table)
        inputs = tuple(segments.get(sid) or _unrecorded(sid, table, record) for sid in record.removed)
        outputs = tuple(segments.get(s.id) or s for s in record.added)
        self._executed.set(table, record.plan_id, record.version)
        if inputs and outputs:
            self._remember(record, inputs, outputs)

    def _replace(
        self,
        table: str,
        inputs: list[Segment],
        outputs: Iterable[Segment],
        plan_id: str | None,
        unknown: set[str] | None = None,
    ) -> None:
        """Inputs leave (each kept as a retired record), outputs become live; journaled.
        `unknown` inputs were never described to the catalog: their record keeps no fingerprint.
        An input no longer live that the filter may hold was retired before (the commit of a
        plan applied already): it is not recorded twice."""
        segments = self._table(table)
        for segment in inputs:
            if segments.pop(segment.id, None) is None and self.may_be_retired(table, segment.id):
                continue
            retired = RetiredSegment.of(segment, plan_id)
            if unknown and segment.id in unknown:
                retired = replace(retired, fingerprint="")
            self._retired.set(table, segment.id, retired)
            self._filter(table).add(segment.id)
            self._journal.live[(table, segment.id)] = None
            self._journal.retired.append(retired)
        for segment in outputs:
            segments[segment.id] = segment
            self._journal.live[(table, segment.id)] = segment

    def _table(self, table: str) -> TableSegments:
        found = self._tables.get(table)
        if found is None:
            found = self._tables[table] = TableSegments()
        return found

    def _filter(self, table: str) -> RetiredFilter:
        found = self._filters.get(table)
        if found is None:
            found = self._filters[table] = RetiredFilter()
        return found

    # -- versions, announcements and the durable store ----------------------------

    def advance(self, table: str, version: int) -> None:
        """Every commit of `table` up to `version` is folded in."""
        if version > self._versions.get(table, -1):
            self._versions[table] = version
            self._journal.marks[table] = self._mark(table)

    def published_config(self, table: str) -> str | None:
        return self._configs.get(table)

    def record_config(self, table: str, settings_json: str) -> None:
        """Remember a published table config with the catalog (read back at start-up)."""
        self._configs[table] = settings_json
        self._journal.marks[table] = self._mark(table)

    def merging_enabled(self, table: str) -> bool:
        return table not in self._merging_off

    def switch_merging(self, table: str, enabled: bool) -> bool:
        """Turn merging on or off for a table (kept with its mark); True when that changed it."""
        if enabled == self.merging_enabled(table):
            return False
        if enabled:
            self._merging_off.discard(table)
        else:
            self._merging_off.add(table)
        self._journal.marks[table] = self._mark(table)
        return True

    def failures(self, table: str) -> tuple[Failure, ...]:
        """The table's failed plans (or work), newest first; not the merges merely begun."""
        return tuple(f for f in self._failures.get(table, ()) if not f.running)

    def failure_records(self, table: str) -> tuple[Failure, ...]:
        """Everything kept of the table's failures, newest first: the merges begun too."""
        return self._failures.get(table, ())

    def note_failure(self, table: str, failure: Failure) -> None:
        """Keep a failed plan (or table), or a merge begun, with the table's mark, newest first."""
        self._failures[table] = noted(self.failure_records(table), failure)
        self._journal.marks[table] = self._mark(table)

    def forgive(self, table: str) -> None:
        """The table's work succeeded: its streak ends (kept failures say 0), its begun marks go."""
        kept = self.failure_records(table)
        settled = tuple(replace(f, streak=0) for f in kept if not f.running)
        if settled != kept:
            self._failures[table] = settled
            self._journal.marks[table] = self._mark(table)

    def quarantined(self, table: str) -> str | None:
        """Why the table's merges are held (its merges failed again and again), or None."""
        return self._quarantine.get(table)

    def quarantine(self, table: str, why: str | None) -> bool:
        """Hold the table's merges with `why` (None: release them); True when that changed it."""
        if self._quarantine.get(table) == why:
            return False
        if why is None:
            self._quarantine.pop(table, None)
        else:
            self._quarantine[table] = why
        self._journal.marks[table] = self._mark(table)
        return True

    def debt_outlook(self, table: str) -> str | None:
        return self._debts.get(table)

    def note_debt_outlook(self, table: str, outlook_json: str) -> None:
        """Keep the job's latest debt outlook with the table's mark (status reads it)."""
        if self._debts.get(table) != outlook_json:
            self._debts[table] = outlook_json
            self._journal.marks[table] = self._mark(table)

    def mark_announced(self, table: str, version: int) -> None:
        """Every merge of `table` up to `version` is announced: the executed plans kept for
        `announce_unannounced` are kept only past it."""
        if version > self._announced.get(table, -2):
            self._announced[table] = version
            history = self._history.get(table)
            if history:
                self._history[table] = [
                    e for e in history if e.version > version or self.owes(table, e.plan.plan_id)
                ]
            self._journal.marks[table] = self._mark(table)

    def _mark(self, table: str) -> TableMark:
        return TableMark(
            self._versions.get(table, -1),
            self._announced.get(table),
            self._filter(table),
            self._configs.get(table),
            self.merging_enabled(table),
            self.failure_records(table),
            self._debts.get(table),
            self._quarantine.get(table),
            tuple(e.version for e in self._history.get(table, ())),
        )

    @property
    def changed(self) -> bool:
        """Whether anything changed since the last `take_changes`."""
        return bool(self._journal)

    def take_changes(self) -> CatalogChanges:
        """The journal since the last call, with every touched table's current mark."""
        changes, self._journal = self._journal, CatalogChanges()
        for table in {t for t, _ in changes.live} | {r.table for r in changes.retired}:
            changes.marks[table] = self._mark(table)
        changes.marks = {t: self._mark(t) for t in changes.marks}
        return changes

    def put_back(self, changes: CatalogChanges) -> None:
        """A journal `take_changes` gave whose save failed, ahead of what changed since: the next
        save writes both (a mark saved later would otherwise claim versions whose segment
        changes were never written, and a restart would not read them again)."""
        newer, self._journal = self._journal, changes
        changes.live.update(newer.live)  # a later change of a segment wins
        changes.retired.extend(newer.retired)
        changes.marks.update(newer.marks)

    @classmethod
    def from_store(cls, stored: StoredCatalog) -> SegmentCatalog:
        """The catalog as last saved: live segments and marks, with an empty journal."""
        catalog = cls()
        for table, segments in stored.segments.items():
            catalog._tables[table] = TableSegments(segments)
        for table, mark in stored.marks.items():
            catalog._table(table)
            catalog._versions[table] = mark.version
            catalog._filters[table] = mark.retired
            if mark.announced is not None:
                catalog._announced[table] = mark.announced
            if mark.config is not None:
                catalog._configs[table] = mark.config
            if not mark.merging:
                catalog._merging_off.add(table)
            if mark.failures:
                catalog._failures[table] = mark.failures
            if mark.debt is not None:
                catalog._debts[table] = mark.debt
            if mark.quarantine is not None:
                catalog._quarantine[table] = mark.quarantine
            if mark.unannounced:
                catalog._to_recall[table] = mark.unannounced
        return catalog

    # -- Delta as the truth -----------------------------------------------------

    def reconcile(self, table: str, present_ids: Iterable[str]) -> tuple[set[str], set[str]]:
        """Align with the ids Delta actually holds; return (unknown, gone).

        Known-but-gone segments are dropped. Segments present in Delta but absent
        from the commit metadata are reported for the caller to describe. A segment known to be
        empty (an upsert merge whose every row was superseded) has no file to find: it stays.
        """
        present = set(present_ids)
        gone = {sid for sid, s in self._table(table).items() if sid not in present and not s.is_empty}
        self.apply(SegmentsGone(table, frozenset(gone)))
        return present - set(self._tables[table]), gone

    def recount(self, table: str, counts: Mapping[str, RowCount]) -> list[Segment]:
        """Take the visible and hidden rows Delta counts where others deleted rows (held in
        deletion vectors, purged, or rewritten away), and the bytes of segments whose commit did
        not tell them (delta-rs); returns the segments whose counts changed, as they are now.
        Rows added are left to the commits that added them, which the catalog folds (a count
        read beside such a commit would be folded twice)."""
        changed = []
        for sid, count in counts.items():
            known = self.get(table, sid)
            if known is None or count.visible < 0:
                continue
            recounted = known
            if count.hidden or known.deleted or count.visible < known.records:
                recounted = replace(recounted, records=count.visible, deleted=count.hidden)
            if known.bytes == 0:
                recounted = replace(recounted, bytes=count.bytes)
            if recounted == known:
                continue
            self.apply(SegmentUpdated(recounted))
            changed.append(recounted)
        return changed

    @classmethod
    def from_commits(cls, commits: Mapping[str, Iterable[CommitRecord]]) -> SegmentCatalog:
        """Every table's history folded in order; a table with no commit is known and empty."""
        catalog = cls()
        for table, records in commits.items():
            catalog._table(table)
            for record in sorted(records, key=lambda r: r.version):
                catalog.apply(record)
        return catalog


def _unrecorded(segment_id: str, table: str, record: CommitRecord) -> Segment:
    """An input whose load left no compactor metadata (a producer wrote Delta itself):
    its id is certain; its extent is taken from the plan's output."""
    output = record.added[0]
    return Segment(segment_id, table, output.range, loaded_at=output.loaded_at)

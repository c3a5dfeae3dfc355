"""Admission: decode each message, validate it against the tables, and say what it triggers.

A valid completion is recorded in the catalog and triggers an attempt on its
table; an operator's request or a newer config triggers the work it names.
Anything else becomes a dead letter with its reason, never an exception that
stops the stream.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from compactor.catalog.changes import SegmentAdded, SegmentUpdated
from compactor.catalog.fold import SegmentCatalog
from compactor.catalog.store import CatalogStore
from compactor.codec.events import Codec
from compactor.config.rules import RuleName
from compactor.delta.store import TableStore
from compactor.domain.events import CompactionRequested, ConfigApplied, SegmentAction, SegmentCompleted
from compactor.domain.segments import Origin, Segment
from compactor.errors import DeadLetterReason, EventDecodeError, InvalidSegmentError, Rejected
from compactor.rules.late_data import refusal, sealing_rule
from compactor.stream.control import Control
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.table_configs import TableConfigs
from compactor.stream.triggers import DeadLetter, Envelope, Trigger

log = logging.getLogger(__name__)

InputEvent = SegmentCompleted | CompactionRequested | ConfigApplied


def table_of(event: InputEvent) -> str:
    return event.segment.table if isinstance(event, SegmentCompleted) else event.table


@dataclass(frozen=True, slots=True)
class Decoded:
    envelope: Envelope
    event: InputEvent


AWAITED = 1024  # names refused as unknown tables, kept to be looked for again


class KnownTables:
    """Which tables exist. A table not known yet is asked of the store at each of its events,
    never answered from a remembered "no": an event that comes while the table's first commit
    is being written is refused, and the next one finds the table (issue 49). A table first
    seen while the job runs is handed to `on_new` before its event is recorded (the catalog
    reads its history then, so the loads committed before it, an early event's among them,
    are planned with it), and listed in `new` (to be announced). A shard's job `owns` only
    some: an event of another shard's table (keyed otherwise than by its table name, so placed
    in a partition of the wrong shard) is refused, never merged here."""

    def __init__(
        self,
        store: TableStore,
        known: Sequence[str] = (),
        owns: Callable[[str], bool] = lambda _: True,
        on_new: Callable[[str], object] = lambda _: None,
    ) -> None:
        self.store = store
        self._known = set(known)
        self.owns = owns
        self.on_new = on_new
        self.new: list[str] = []
        # names refused as unknown, newest last: the upkeep looks for them again, so a table whose
        # only events came before its first commit is found without a restart (at most AWAITED)
        self._awaited: OrderedDict[str, None] = OrderedDict()

    def awaited(self) -> list[str]:
        """Tables refused as unknown that may yet be born (asked again by the upkeep)."""
        return list(self._awaited)

    def found(self, table: str) -> bool:
        """An awaited table now exists: known from here on, handed to `on_new` and listed in
        `new`, as at its first event. False when it is known already, or not ours."""
        self._awaited.pop(table, None)
        if table in self._known or not self.owns(table):
            return False
        self.on_new(table)
        self._known.add(table)
        self.new.append(table)
        return True

    def require(self, table: str) -> None:
        if not self.owns(table):
            raise Rejected(
                DeadLetterReason.WRONG_PARTITION,
                f"table {table!r} belongs to another shard: its events must be keyed by the table name "
                "(Kafka's default partitioner) so that they reach the shard that merges it",
            )
        if table not in self._known:
            if not self.store.exists(table):
                self._awaited[table] = None
                self._awaited.move_to_end(table)
                while len(self._awaited) > AWAITED:
                    self._awaited.popitem(last=False)
                raise Rejected(
                    DeadLetterReason.UNKNOWN_TABLE,
                    f"no table {table!r} in the warehouse (or its first commit is not written yet)",
                )
            self.on_new(table)  # before it counts as known: a failed read is tried again
            self._known.add(table)
            self.new.append(table)


class Admission:
    """Decode -> validate -> record: what each message of a batch asks for."""

    def __init__(
        self,
        codec: Codec,
        catalog: SegmentCatalog,
        configs: TableConfigs,
        tables: KnownTables,
        catalog_store: CatalogStore,
        control: Control,
        clock: Callable[[], datetime],
        metrics: MetricsSink | None = None,
    ) -> None:
        self.codec = codec
        self.catalog = catalog  # loads are recorded in it
        self.configs = configs  # published configs are adopted
        self.tables = tables
        self.catalog_store = catalog_store  # what is kept of segments retired before this process
        self.control = control
        self.clock = clock
        self.metrics = metrics or NoMetrics()
        self.redelivered = 0  # events of segments already tracked (or merged away since)

    def decode(self, envelopes: Sequence[Envelope]) -> tuple[list[Decoded], list[DeadLetter]]:
        decoded, dead = [], []
        for envelope in envelopes:
            try:
                decoded.append(Decoded(envelope, self.codec.decode_input(envelope.value)))
            except EventDecodeError as exc:
                dead.append(DeadLetter(envelope, exc.reason, exc.detail))
        return decoded, dead

    def rows_present(self, decoded: Sequence[Decoded]) -> dict[str, set[str]]:
        """Which announced new loads have rows in their table: one lookup per table per batch."""
        wanted: dict[str, set[str]] = {}
        for item in decoded:
            e = item.event
            if not isinstance(e, SegmentCompleted) or e.action is not SegmentAction.CREATE:
                continue
            if e.segment.origin is Origin.LOAD and not self.catalog.knows(e.segment.table, e.segment.id):
                wanted.setdefault(e.segment.table, set()).add(e.segment.id)
        present = {}
        for table, ids in wanted.items():
            try:
                self.tables.require(table)
            except Rejected:
                continue  # admit() dead-letters each of its events
            present[table] = self.tables.store.segments_with_rows(table, sorted(ids))
        return present

    def admit(self, event: InputEvent, present: dict[str, set[str]]) -> Trigger | None:
        """Validate one event and record what it says; the work it triggers, or `Rejected`."""
        if isinstance(event, CompactionRequested):
            return self._requested(event)
        if isinstance(event, ConfigApplied):
            self.tables.require(event.table)
            adopted = self.configs.adopt(event)
            if adopted is not None and any(r.rule == RuleName.REFRESH.value for r in adopted.rules):
                return Trigger(event.table, "config", only_rule=RuleName.REFRESH)
            return None
        segment = event.segment
        self.tables.require(segment.table)
        if event.action is SegmentAction.CREATE:
            self._completed(segment, present.get(segment.table, set()))
        else:
            self._sub_partition_changed(segment)
        return Trigger(segment.table, str(segment.origin), segment_id=segment.id)

    def _completed(self, segment: Segment, with_rows: set[str]) -> None:
        table = segment.table
        known = self.catalog.get(table, segment.id)
        if known is None and self._retired_before(segment):
            self._redelivered(table)  # a re-delivered event of a segment merged away since
            return
        if known is not None and segment.origin is not Origin.LOAD:
            return  # our own merge or refresh output
        settings = self.configs.for_table(table)
        if known is None and settings.needs_disjoint_ranges:
            held = self.catalog.columns(table)
            overlapping = (held.start < segment.range.end_ts) & (held.end > segment.range.start_ts)
            clash = [s.id for s in held.pick(np.flatnonzero(overlapping))]
            why = refusal(segment, sealing_rule(settings.rules)) if clash else None
            if why:
                raise Rejected(
                    DeadLetterReason.OVERLAPPING_RANGE,
                    f"segment {segment.id} {segment.range} overlaps {', '.join(sorted(clash))}; {why}",
                )
            if clash:
                log.info(
                    "table %s: segment %s is late data (overlaps %s)", table, segment.id, ", ".join(clash)
                )
        if known is None and segment.origin is Origin.LOAD and segment.id not in with_rows:
            raise Rejected(
                DeadLetterReason.ROWS_NOT_IN_DELTA,
                f"table {table} holds no rows with segment_id {segment.id!r}",
            )
        try:
            if self.catalog.apply(SegmentAdded(segment)):
                log.info("table %s: segment %s %s recorded", table, segment.id, segment.range)
                if segment.origin is Origin.LOAD:
                    self.control.on_load(segment, self.clock())
            elif known is not None:
                self._redelivered(table)  # the same load announced again
        except InvalidSegmentError as exc:
            raise Rejected(DeadLetterReason.DUPLICATE_SEGMENT_ID, str(exc)) from None

    def _redelivered(self, table: str) -> None:
        """An event of a segment already tracked (what Hydrolix's merge counts as "partitions
        sourced that are already tracked"): counted, nothing else to do."""
        self.redelivered += 1
        self.metrics.on_redelivered(table)

    def _retired_before(self, segment: Segment) -> bool:
        """Was this id merged away already? True for an exact re-delivery of its event; a
        different segment under a retired id is refused: ids are never reused."""
        table, sid = segment.table, segment.id
        if not self.catalog.may_be_retired(table, sid):
            return False
        record = self.catalog.retired_record(table, sid) or self.catalog_store.retired(table, [sid]).get(sid)
        if record is None:
            return False  # the filter's rare false positive
        if segment.origin is not Origin.LOAD or record.same_event(segment):
            return True
        raise Rejected(
            DeadLetterReason.DUPLICATE_SEGMENT_ID,
            f"segment {sid} of table {table} was merged away (plan {record.retired_by}) with range "
            f"{record.range} and {record.records} records; this event announces {segment.range} and "
            f"{segment.records} records: a segment id is never reused",
        )

    def _merged_away(self, segment: Segment) -> bool:
        """Was this id merged away, whether its record is still in memory or only in the store
        (memory keeps the newest records only: `catalog.retired.RETIRED_KEPT`)?"""
        table, sid = segment.table, segment.id
        if self.catalog.retired(table, sid):
            return True
        if not self.catalog.may_be_retired(table, sid):
            return False
        return sid in self.catalog_store.retired(table, [sid])

    def _sub_partition_changed(self, segment: Segment) -> None:
        """A sub-partition was added to, or is being refreshed in, an existing segment."""
        if self.catalog.get(segment.table, segment.id) is None and self._merged_away(segment):
            return  # a re-delivered event of a segment merged away since
        if self.catalog.get(segment.table, segment.id) is None:
            raise Rejected(
                DeadLetterReason.UNKNOWN_SEGMENT,
                f"segment {segment.id} of table {segment.table} is not known",
            )
        try:
            if self.catalog.apply(SegmentUpdated(segment)):
                unsettled = (
                    f" (unsettled {segment.sub_partition_states})" if segment.sub_partition_states else ""
                )
                log.info(
                    "table %s: segment %s sub-partitions %s%s",
                    segment.table,
                    segment.id,
                    sorted(segment.sub_partitions),
                    unsettled,
                )
        except InvalidSegmentError as exc:
            raise Rejected(DeadLetterReason.RANGE_MISMATCH, str(exc)) from None

    def _requested(self, request: CompactionRequested) -> Trigger:
        """An operator's request: run one configured rule now, a manual merge (planned later), a
        sub-partition delete, a merging switch, or the cancel of a merge in flight."""
        self.tables.require(request.table)
        if request.cancel_plan is not None:
            return Trigger(
                request.table, "control", cancel_plan=request.cancel_plan, request_id=request.request_id
            )
        if request.merging is not None:
            return Trigger(request.table, "control", merging=request.merging)
        if request.delete_sub_partition is not None:
            if self.configs.for_table(request.table).sub_partition is None:
                raise Rejected(
                    DeadLetterReason.INVALID_VALUE,
                    f"table {request.table} declares no sub-partition column; "
                    f"there is no value {request.delete_sub_partition!r} to delete",
                )
            return Trigger(request.table, "request", delete_value=request.delete_sub_partition)
        if request.rule is None:
            return Trigger(request.table, "request", merge_ids=request.segment_ids)
        if request.rule not in {r.rule for r in self.configs.for_table(request.table).rules}:
            raise Rejected(
                DeadLetterReason.UNKNOWN_RULE,
                f"table {request.table} has no rule {request.rule!r} configured",
            )
        return Trigger(request.table, "request", only_rule=request.rule)

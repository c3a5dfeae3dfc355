"""Where the console's pages come from.

- `JobSource`: the running job (`compactor run --console-port`). Its handlers' state is copied
  a few hundred tables at a time under each handler's lock (a batch waits at most that long),
  and everything is computed and rendered outside it.
- `WarehouseSource`: no job of its own (`compactor console`): what `compactor status` reads (the
  catalog the job saves, the tables' history), refreshed in a daemon thread every `refresh`
  seconds; a table's page is read when it is asked for.

Both keep the warehouse page as one `Warehouse` value, replaced whole when a refresh ends, so a
page request only reads it: the page for 10,000 tables costs sorting and rendering 50 rows.

A job's copy costs about 30-55 us a table (3-6 s at 100,000 tables, on the job's driver). So a
copy that took longer than `WAIT_FOR_COPY_S` is replaced in the background while pages are
served from it (the page says "as of" when), and copies are at least `took / COPY_SHARE` apart:
the console spends at most a tenth of one core on them, however many browsers poll. The first
copy is made behind the page too: until it ends, the page says so instead of waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from compactor.catalog.changes import CommitRecord
from compactor.config.tables import ProjectConfig, TableSettings
from compactor.domain.clock import now_utc
from compactor.domain.plans import Decision, MergePlan
from compactor.domain.segments import Segment
from compactor.errors import CompactorError, Rejected
from compactor.observe.console.histories import Histories
from compactor.observe.console.snapshot import (
    MergeRow,
    PlanRow,
    ShardRow,
    TableDetail,
    TableRow,
    Totals,
    Warehouse,
    merges_per_minute,
    trend_words,
)
from compactor.observe.console.topic_tail import TopicTail
from compactor.observe.metrics.health_collector import live_facts
from compactor.observe.pictures.timeline import layout
from compactor.observe.status.table_health import TableFacts, assess
from compactor.observe.status.table_status import TableStatus
from compactor.rules.engine import evaluate

if TYPE_CHECKING:
    from compactor.delta.spark_store import SparkTableStore
    from compactor.stream.handler import BatchHandler

log = logging.getLogger(__name__)

CHUNK = 256  # tables copied per hold of a handler's lock
FRESH_FOR_S = 2.0  # a running job's warehouse page is read again at most this often
WAIT_FOR_COPY_S = 0.25  # a copy quicker than this is made while the page waits; a slower one behind it
FIRST_COPY_WAIT_S = 0.5  # the longest the first page waits for the first copy before it says so
COPY_SHARE = 0.1  # the most of one core the console's copies of the job's state may take
RECENT = timedelta(hours=6)  # a timeline outlines what merges wrote this recently
RATE_WINDOW = timedelta(minutes=10)  # merges per minute are counted over this window


class ConsoleSource(Protocol):
    def warehouse(self) -> Warehouse: ...

    def knows(self, name: str) -> bool: ...

    def table(self, name: str) -> TableDetail | None: ...

    def shards(self) -> list[ShardRow] | None: ...


# -- a running job ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Copied:
    """One table's state, copied under its handler's lock."""

    table: str
    segments: int
    bytes: int
    facts: TableFacts
    eta: timedelta | None
    stuck: bool
    drain: float | None
    debt_bytes: int
    due: datetime | None
    merging: bool


@dataclass(frozen=True)
class _Copy:
    """A copy of the job's state, when it was made and how long it took."""

    warehouse: Warehouse
    at: float  # time.monotonic() when it was made
    took: float  # seconds

    def stale(self, fresh_for: float) -> bool:
        """Older than `fresh_for`, and than its cost allows: copies `took / COPY_SHARE` apart."""
        return time.monotonic() - self.at > max(fresh_for, self.took / COPY_SHARE)


class JobSource:
    """The running job's handlers (one per shard it runs), read as the console asks."""

    def __init__(
        self,
        handlers: Callable[[], Sequence[BatchHandler]],
        project: ProjectConfig,
        tail: TopicTail | None = None,
        shards: Callable[[], list[ShardRow] | None] = lambda: None,
        fresh_for: float = FRESH_FOR_S,
    ) -> None:
        self.handlers = handlers
        self.project = project
        self.tail = tail
        self._shards = shards
        self.fresh_for = fresh_for
        self.histories = Histories()  # a table page's refresh reads only the commits since the last
        self._latest: _Copy | None = None
        self._reading = threading.Lock()  # one copy at a time
        self._refreshing: threading.Thread | None = None

    def warehouse(self) -> Warehouse:
        """The warehouse as of at most `fresh_for` seconds ago, or as of the last copy while a
        slow one (a large warehouse) is replaced in the background: pages polled by many
        browsers copy the job's state once per period, not once per request. No page waits
        longer than `WAIT_FOR_COPY_S` for a slow copy: before the first one ends, the page says
        it is being made (its live fragment fills in when it is done)."""
        with self._reading:
            latest = self._latest
            if latest is not None and not latest.stale(self.fresh_for):
                return latest.warehouse
            if latest is not None and latest.took < WAIT_FOR_COPY_S:
                self._latest = self._copy()
                return self._latest.warehouse
            copying = self._refreshing or self._start_refresh()
        if latest is not None:
            return latest.warehouse
        copying.join(FIRST_COPY_WAIT_S)  # a small warehouse's first copy is on the first page
        with self._reading:
            if self._latest is not None:
                return self._latest.warehouse
        now = now_utc()
        tables = sum(h.catalog.table_count for h in self.handlers())
        note = f"copying the job's state of {tables:,} table(s); the rows appear when it is done"
        return Warehouse((), _totals([], None, now, None), now, (note,))

    def _start_refresh(self) -> threading.Thread:
        """A copy behind the pages (the caller holds `_reading`)."""
        self._refreshing = threading.Thread(target=self._refresh, name="compactor-console-copy", daemon=True)
        self._refreshing.start()
        return self._refreshing

    def _refresh(self) -> None:
        try:
            copy = self._copy()
            with self._reading:
                self._latest = copy
        except Exception:  # the page keeps the last copy; the next view tries again
            log.exception("console: copying the job's state failed")
        finally:
            with self._reading:
                self._refreshing = None

    def _copy(self) -> _Copy:
        began = time.monotonic()
        warehouse = self._read()
        ended = time.monotonic()
        return _Copy(warehouse, ended, ended - began)

    def knows(self, name: str) -> bool:
        return any(h.catalog.version(name) is not None for h in self.handlers())

    def _read(self) -> Warehouse:
        now, rows, lags, outages = now_utc(), list[TableRow](), list[float](), list[str]()
        for handler in self.handlers():
            rows += [_row(c) for c in _copy_all(handler, now)]
            lag = handler.control.lag
            if lag is not None:
                lags.append(lag)
            outage = handler.outage_line()
            if outage is not None:
                outages.append(outage)
        merges = self.tail.merges() if self.tail is not None else None
        notes = (*sorted(set(outages)), *_notes(self.tail))
        return Warehouse(tuple(rows), _totals(rows, merges, now, sum(lags) if lags else None), now, notes)

    def table(self, name: str) -> TableDetail | None:
        handler = next((h for h in self.handlers() if h.catalog.version(name) is not None), None)
        if handler is None:
            return None
        now = now_utc()
        with handler.lock:  # a copy: the page is built outside the lock
            (copied,) = _copy_tables(handler, [name], now)
            segments = list(handler.catalog.segments(name))
            running = [p for p in handler.merges.inflight.running_plans() if p.table == name]
            failures = _failures(handler.catalog.failures(name), now)
            settings = handler.configs.for_table(name)
            log_line = handler.log_line(name)
        history = self.histories.of(handler.keeper.store, name)
        detail = _detail(
            _row(copied), segments, history, running, failures, settings, self.project, self.tail, now
        )
        return replace(detail, notes=(log_line, *detail.notes)) if log_line else detail

    def shards(self) -> list[ShardRow] | None:
        return self._shards()


def _copy_all(handler: BatchHandler, now: datetime) -> list[_Copied]:
    names = list(handler.catalog.table_names)
    copied: list[_Copied] = []
    for start in range(0, len(names), CHUNK):
        with handler.lock:
            copied += _copy_tables(handler, names[start : start + CHUNK], now)
    return copied


def _copy_tables(handler: BatchHandler, tables: Sequence[str], now: datetime) -> list[_Copied]:
    view, control, due = handler.view(), handler.control, handler.planner.due
    found = []
    for table in tables:
        if handler.catalog.version(table) is None:
            continue  # left the warehouse since the names were read
        facts = live_facts(view, table)  # its debt, bytes and objective, each read once
        outlook = control.outlook(table, now, facts.objective)
        when = due.get(table)
        found.append(
            _Copied(
                table,
                len(handler.catalog.segments(table)),
                facts.total_bytes,
                facts,
                outlook.eta if outlook else None,
                outlook.stuck if outlook else False,
                outlook.drain_bytes_per_hour if outlook else None,
                facts.awaiting_bytes,
                when.at if when else None,
                facts.merging_enabled,
            )
        )
    return found


def _row(copied: _Copied) -> TableRow:
    health = assess(copied.facts)
    return TableRow(
        table=copied.table,
        word=health.word,
        state=health.state,
        score=health.score,
        segments=copied.segments,
        bytes=copied.bytes,
        awaiting_segments=copied.facts.awaiting_segments,
        awaiting_bytes=copied.facts.awaiting_bytes,
        trend=trend_words(copied.eta, copied.stuck, copied.debt_bytes, copied.drain),
        next_due=copied.due,
        merging=copied.merging,
    )


# -- the warehouse, with no job of its own ----------------------------------------------------


class WarehouseSource:
    """What `compactor status` reads, kept fresh by a daemon thread (`start`)."""

    def __init__(
        self,
        spark: Any,
        warehouse: str,
        project: ProjectConfig,
        store: SparkTableStore,
        tail: TopicTail | None = None,
        shards: Callable[[], list[ShardRow] | None] = lambda: None,
        refresh: float = 30.0,
    ) -> None:
        self.spark = spark
        self.warehouse_uri = warehouse
        self.project = project
        self.store = store
        self.tail = tail
        self._shards = shards
        self.refresh = refresh
        self.histories = Histories()
        self._latest = Warehouse(
            (), _totals([], None, now_utc(), None), now_utc(), ("reading the warehouse",)
        )
        self._statuses: dict[str, TableStatus] = {}
        self._stored: Any = None
        self._stop = threading.Event()

    def start(self) -> WarehouseSource:
        self.read()
        threading.Thread(target=self._loop, name="compactor-console-refresh", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def read(self) -> None:
        """Read every table's status now (the daemon thread does this every `refresh` seconds)."""
        from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
        from compactor.observe.status.warehouse_status import table_report

        now = now_utc()
        stored = DeltaCatalogStore(self.spark, self.warehouse_uri, writer=False).load()
        statuses = {}
        for table in self.store.tables():
            try:
                statuses[table] = table_report(
                    self.spark, self.warehouse_uri, self.store, stored, self.project, table, now
                )
            except (CompactorError, Rejected) as exc:
                log.warning("console: table %s left out: %s", table, exc)
        rows = [_status_row(s) for s in statuses.values()]
        merges = self.tail.merges() if self.tail is not None else None
        self._stored, self._statuses = stored, statuses
        self._latest = Warehouse(tuple(rows), _totals(rows, merges, now, None), now, _notes(self.tail))

    def warehouse(self) -> Warehouse:
        return self._latest

    def knows(self, name: str) -> bool:
        return name in self._statuses

    def table(self, name: str) -> TableDetail | None:
        status = self._statuses.get(name)
        if status is None:
            return None
        now = now_utc()
        failures = _failures(status.failures, now)
        settings = self.project.for_table(name)
        return _detail(
            _status_row(status),
            list(status.segments),
            self.histories.of(self.store, name),
            [],
            failures,
            settings,
            self.project,
            self.tail,
            now,
        )

    def shards(self) -> list[ShardRow] | None:
        return self._shards()

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh):
            try:
                self.read()
            except Exception:  # the warehouse is out of reach: the page keeps the last reading
                log.exception("console: reading the warehouse failed; trying again in %.0fs", self.refresh)


def _status_row(status: TableStatus) -> TableRow:
    health = status.health
    inputs = [s for p in status.ready for s in p.inputs]
    debt = status.debt or {}
    eta = debt.get("eta_seconds")
    return TableRow(
        table=status.table,
        word=health.word if health else ("on" if status.merging else "disabled"),
        state=health.state if health else "merged",
        score=health.score if health else None,
        segments=len(status.segments),
        bytes=sum(s.bytes for s in status.segments),
        awaiting_segments=len(inputs),
        awaiting_bytes=sum(s.bytes for s in inputs),
        trend=trend_words(
            timedelta(seconds=eta) if eta is not None else None,
            bool(debt.get("stuck")),
            sum(s.bytes for s in inputs),
            debt.get("drain_bytes_per_hour"),
        ),
        next_due=status.due.at if status.due else None,
        merging=status.merging,
    )


# -- shared ------------------------------------------------------------------------------------


def _totals(
    rows: Sequence[TableRow], merges: Sequence[MergeRow] | None, now: datetime, lag: float | None
) -> Totals:
    return Totals(
        tables=len(rows),
        segments=sum(r.segments for r in rows),
        bytes=sum(r.bytes for r in rows),
        awaiting_segments=sum(r.awaiting_segments for r in rows),
        awaiting_bytes=sum(r.awaiting_bytes for r in rows),
        merges_per_minute=None if merges is None else merges_per_minute(merges, now, RATE_WINDOW),
        lag=lag,
    )


def _notes(tail: TopicTail | None) -> tuple[str, ...]:
    if tail is None:
        return (
            "no Kafka broker given (--bootstrap-servers): recent merges, dead letters and controls need one",
        )
    return (tail.problem,) if tail.problem else ()


def _failures(failures: Sequence[Any], now: datetime) -> tuple[str, ...]:
    return tuple(
        f"{f.key} ({f.rule or 'table'}): {f.reason}; cooling down until {f.until.isoformat()}"
        for f in failures
        if f.until > now
    )


def _detail(
    row: TableRow,
    segments: list[Segment],
    history: Sequence[CommitRecord],
    running: Sequence[MergePlan],
    failures: tuple[str, ...],
    settings: TableSettings,
    project: ProjectConfig,
    tail: TopicTail | None,
    now: datetime,
) -> TableDetail:
    """A table's page, built outside any lock from what was copied."""
    evaluation = evaluate(row.table, segments, settings, now, explain=True)
    plans = tuple(_plan_row(p, evaluation.decisions) for p in evaluation.ready)
    if tail is not None:
        merges = tuple(tail.merges(row.table)[:20])
        dead = tuple(tail.dead_letters(row.table)[:20])
    else:
        merges, dead = _history_merges(row.table, history), ()
    override = project.tables.get(row.table)
    return TableDetail(
        row=row,
        timeline=layout(row.table, segments, history, now, RECENT),
        running=frozenset(sid for p in running for sid in p.input_ids),
        running_plans=tuple(p.plan_id for p in running),
        plans=plans,
        merges=merges,
        config=settings.model_dump(mode="json"),
        overrides=frozenset(override.model_fields_set) if override is not None else frozenset(),
        dead_letters=dead,
        failures=failures,
        notes=_notes(tail),
    )


def _plan_row(plan: MergePlan, decisions: Sequence[Decision]) -> PlanRow:
    details = [d.detail for d in decisions if d.plan_id == plan.plan_id and d.chosen and d.detail]
    reason = next(iter(dict.fromkeys(details)), "") or f"{plan.rule} {plan.level or plan.pool or ''}".strip()
    return PlanRow(plan.plan_id, str(plan.rule), plan.input_ids, plan.bytes_in, reason)


def _history_merges(table: str, history: Sequence[CommitRecord]) -> tuple[MergeRow, ...]:
    """Recent merges from the table's history (no broker: no sizes in or durations)."""
    found = [c for c in reversed(history) if c.op in {"merge", "refresh"}][:20]
    return tuple(
        MergeRow(
            table=table,
            plan_id=c.plan_id or "",
            rule=c.rule or c.op,
            status="SUCCEEDED",
            inputs=c.removed,
            outputs=tuple(s.id for s in c.added),
            bytes_in=None,
            bytes_out=sum(s.bytes for s in c.added),
            duration_ms=None,
            layout=None,
            deleted_rows=None,
            at=c.committed_at,
        )
        for c in found
    )

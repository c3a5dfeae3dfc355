"""The foreachBatch handler: wiring of codec -> catalog -> planners -> executor -> emit.

Commit order, per plan: (1) the Delta commit that replaces the inputs, (2) the
catalog update, (3) `MergeResult` and the output's `SegmentCompleted` produced
and acknowledged by Kafka. Only when the handler returns does Spark checkpoint
the batch's offsets, so a crash anywhere replays the batch; deterministic plan
ids and Delta's txnAppId make the replay a no-op where work was already done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from compactor import delta_executor as delta
from compactor.announced import AnnouncedVersions
from compactor.catalog import SegmentCatalog
from compactor.codec import Codec, now_utc
from compactor.config import ProjectConfig, RefreshRule, TableSettings, settings_from_json
from compactor.domain import MergePlan, Origin, Segment
from compactor.errors import (
    CompactorError,
    ConfigError,
    DeliveryError,
    EventDecodeError,
    InvalidSegmentError,
    ManualMergeError,
)
from compactor.events import (
    CompactionRequested,
    ConfigApplied,
    MergeResult,
    MergeStatus,
    SegmentAction,
    SegmentCompleted,
)
from compactor.faults import AFTER_BOOKKEEPING, AFTER_COMMIT, AFTER_PLANNING, BETWEEN_EMITS, fault_point
from compactor.kafka_io import (
    DEAD_LETTER_DETAIL_HEADER,
    DEAD_LETTER_REASON_HEADER,
    EventProducer,
    KafkaSettings,
)
from compactor.refresh_executor import execute_refresh, index_facts
from compactor.rules import manual, refresh
from compactor.rules.engine import evaluate
from compactor.upsert_view import invalid_counts

log = logging.getLogger(__name__)
T = TypeVar("T")

UNKNOWN_TABLE = "unknown_table"
DUPLICATE_SEGMENT = "duplicate_segment_id"
OVERLAPPING_RANGE = "overlapping_range"
UNKNOWN_RULE = "unknown_rule"
UNKNOWN_SEGMENT = "unknown_segment"
RANGE_MISMATCH = "range_mismatch"
MANUAL_MERGE_REJECTED = "manual_merge_rejected"
INVALID_CONFIG = "invalid_config"
ROWS_NOT_IN_DELTA = "rows_not_in_delta"
POOL_PROPERTY = "spark.scheduler.pool"
# a failed plan is reported once, then left alone for a while instead of failing on every event
FAILED_PLAN_COOLDOWN = timedelta(minutes=5)

Message = tuple[str, str, bytes, list[tuple[str, bytes]] | None]
InputEvent = SegmentCompleted | CompactionRequested | ConfigApplied

_CONFLICTS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "MetadataChangedException",
    "ConcurrentTransactionException",
    "ProtocolChangedException",
    "ConcurrentTableChange",
)


def is_conflict(exc: BaseException) -> bool:
    """Delta's optimistic-concurrency conflicts, which a retry can resolve."""
    return any(name in f"{type(exc).__name__} {exc}" for name in _CONFLICTS)


@dataclass
class HandlerStats:
    """Counters for operators and tests (also exported as metrics by the job)."""

    events: int = 0
    attempts: int = 0
    empty_attempts: int = 0
    merges: int = 0
    replayed_merges: int = 0
    failed_merges: int = 0
    dead_letters: int = 0
    conflicts: int = 0
    attempt_errors: int = 0
    replans: int = 0
    attempts_by_origin: dict[str, int] = field(default_factory=dict)


class SegmentEventHandler:
    """Callable passed to `foreachBatch`; owns the catalog for the job's lifetime."""

    def __init__(
        self,
        spark: SparkSession,
        config: ProjectConfig,
        warehouse: Path,
        kafka: KafkaSettings,
        producer: EventProducer,
        codec: Codec,
        clock: Callable[[], datetime] = now_utc,
        state_dir: Path | None = None,
    ) -> None:
        self.spark = spark
        self.config = config
        self.warehouse = Path(warehouse)
        self.kafka = kafka
        self.producer = producer
        self.codec = codec
        self.clock = clock
        self.stats = HandlerStats()
        self.catalog = SegmentCatalog()
        self._applied: dict[str, TableSettings] = {}  # configs published since start (ConfigApplied)
        self._known_tables: set[str] = set()
        self._facts: dict[tuple[str, str], refresh.IndexFacts] = {}
        self._cooling: dict[str, datetime] = {}  # failed plan id -> when it may be tried again
        self.announced = AnnouncedVersions(state_dir / "announced.json" if state_dir else None)
        self.rebuild_catalog()
        self._announce_unannounced()

    # -- start-up -------------------------------------------------------------

    def rebuild_catalog(self) -> None:
        """Fold every table's Delta history into the catalog and check it against the data."""
        commits = {
            t: delta.read_commits(self.spark, self.warehouse, t) for t in delta.list_tables(self.warehouse)
        }
        self.catalog = SegmentCatalog.from_commits(commits)
        for table in commits:
            present = delta.segment_ids_present(self.spark, self.warehouse, table)
            unknown, gone = self.catalog.reconcile(table, present)
            for sid in sorted(unknown):
                log.warning(
                    "table %s: segment %s is in Delta without compactor metadata; left alone", table, sid
                )
            if gone:
                log.warning(
                    "table %s: dropped %d catalog segment(s) that Delta no longer holds", table, len(gone)
                )
        self._known_tables = set(commits)
        for table in commits:  # configs published on the topic earlier, recorded in Delta
            recorded = delta.load_table_config(self.spark, self.warehouse, table)
            if recorded:
                settings = settings_from_json(recorded, table)
                if settings.config_version > self.config.for_table(table).config_version:
                    self._applied[table] = settings

    # -- the batch --------------------------------------------------------------

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.select("key", "value", "topic", "partition", "offset").collect()
        log.info("batch %d: %d event(s)", batch_id, len(rows))
        dead: list[Message] = []
        decoded: list[tuple[Any, str, bytes, InputEvent]] = []
        for row in rows:
            self.stats.events += 1
            value = bytes(row.value) if row.value is not None else b""
            key = bytes(row.key).decode(errors="replace") if row.key is not None else ""
            try:
                decoded.append((row, key, value, self.codec.decode_input(value)))
            except EventDecodeError as exc:
                dead.append(self._dead_letter(key, value, exc.reason, exc.detail, row))
        present = self._segments_with_rows([e for *_, e in decoded if isinstance(e, SegmentCompleted)])
        for row, key, value, event in decoded:
            try:
                if isinstance(event, CompactionRequested):
                    self._guarded(self._requested, event)
                elif isinstance(event, ConfigApplied):
                    self._guarded(self._config_applied, event)
                else:
                    self._accept(event, present)
                    self._guarded(self.attempt, event.segment.table, str(event.segment.origin))
            except _Rejected as exc:
                dead.append(self._dead_letter(key, value, exc.reason, exc.detail, row))
        if dead:
            self.producer.send_all(dead)
            self.stats.dead_letters += len(dead)

    def _segments_with_rows(self, events: list[SegmentCompleted]) -> dict[str, set[str]]:
        """Which announced new segments have rows in Delta: one query per table per batch."""
        wanted: dict[str, set[str]] = {}
        for e in events:
            s = e.segment
            if (
                e.action is SegmentAction.CREATE
                and s.origin is Origin.LOAD
                and not self.catalog.knows(s.table, s.id)
            ):
                wanted.setdefault(s.table, set()).add(s.id)
        return {
            table: delta.segments_with_rows(self.spark, self.warehouse, table, sorted(ids))
            for table, ids in wanted.items()
            if self._table_exists(table)
        }

    def _reload_table(self, table: str) -> None:
        """Bring one table's catalog in line with Delta now: its records win, and
        segments Delta no longer holds are dropped (segments known from events stay)."""
        fresh = delta.read_catalog(self.spark, self.warehouse, table)
        known = self.catalog.tables.setdefault(table, {})
        for sid, segment in fresh.tables.get(table, {}).items():
            known[sid] = segment  # Delta's record wins over what events told us
        self.catalog.retired.setdefault(table, set()).update(fresh.retired.get(table, set()))
        self.catalog.reconcile(table, delta.segment_ids_present(self.spark, self.warehouse, table))

    def _guarded(self, work: Callable[..., object], *args: Any) -> None:
        """Run one event's work; an internal failure is logged and counted, not fatal.

        Kafka delivery failures still propagate: the batch must fail and be
        replayed, or an event would be lost. Rejections (bad requests) go on to
        the dead-letter path.
        """
        try:
            work(*args)
        except (DeliveryError, _Rejected):
            raise
        except Exception:
            self.stats.attempt_errors += 1
            log.exception("table work failed for %s; the next event for the table tries again", args[:1])

    def _accept(self, event: SegmentCompleted, present: dict[str, set[str]]) -> None:
        segment = event.segment
        table = segment.table
        if not self._table_exists(table):
            raise _Rejected(UNKNOWN_TABLE, f"no Delta table {table!r} under {self.warehouse}")
        if event.action is not SegmentAction.CREATE:
            self._sub_partition_changed(segment)
            return
        if self.catalog.knows(table, segment.id) and (
            segment.origin is not Origin.LOAD or self.catalog.get(table, segment.id) is None
        ):
            return  # our own merge output, or a re-delivered event for a merged-away segment
        settings = self.config_for(table)
        known = self.catalog.get(table, segment.id)
        if known is None and settings.needs_disjoint_ranges:
            clash = [s.id for s in self.catalog.segments(table) if s.range.overlaps(segment.range)]
            if clash:
                raise _Rejected(
                    OVERLAPPING_RANGE,
                    f"segment {segment.id} {segment.range} overlaps {', '.join(sorted(clash))}; "
                    "this table's rules need disjoint time ranges",
                )
        if known is None and segment.origin is Origin.LOAD and segment.id not in present.get(table, set()):
            raise _Rejected(ROWS_NOT_IN_DELTA, f"table {table} holds no rows with segment_id {segment.id!r}")
        try:
            if self.catalog.add(segment):
                log.info("table %s: segment %s %s recorded", table, segment.id, segment.range)
        except InvalidSegmentError as exc:
            raise _Rejected(DUPLICATE_SEGMENT, str(exc)) from None

    def _sub_partition_changed(self, segment: Segment) -> None:
        """A sub-partition was added to, or is being refreshed in, an existing segment."""
        if (
            self.catalog.knows(segment.table, segment.id)
            and self.catalog.get(segment.table, segment.id) is None
        ):
            return  # a re-delivered event of a segment merged away since
        try:
            if self.catalog.update(segment):
                log.info(
                    "table %s: segment %s sub-partitions %s%s", segment.table, segment.id,
                    sorted(segment.sub_partitions), f" (unsettled {segment.sub_partition_states})" if segment.sub_partition_states else "",
                )  # fmt: skip
        except InvalidSegmentError as exc:
            reason = UNKNOWN_SEGMENT if "is not known" in str(exc) else RANGE_MISMATCH
            raise _Rejected(reason, str(exc)) from None

    def _config_applied(self, event: ConfigApplied) -> None:
        """A newer table config: adopt it, record it in Delta, and evaluate the refresh rule."""
        if not self._table_exists(event.table):
            raise _Rejected(UNKNOWN_TABLE, f"no Delta table {event.table!r} under {self.warehouse}")
        try:
            settings = settings_from_json(event.settings_json, event.table)
        except ConfigError as exc:
            raise _Rejected(INVALID_CONFIG, str(exc)) from None
        if settings.config_version != event.config_version:
            raise _Rejected(
                INVALID_CONFIG,
                f"event says version {event.config_version}, settings say {settings.config_version}",
            )
        if settings.config_version <= self.config_for(event.table).config_version:
            log.info(
                "table %s: config version %d is not newer; ignored", event.table, settings.config_version
            )
            return
        delta.save_table_config(self.spark, self.warehouse, event.table, event.settings_json)
        self._applied[event.table] = settings
        log.info("table %s: config version %d applied", event.table, settings.config_version)
        if any(r.rule == refresh.RULE for r in settings.rules):
            self.attempt(event.table, origin="config", only_rule=refresh.RULE)

    def _requested(self, request: CompactionRequested) -> None:
        """An operator's request: run one rule now, or a validated manual merge."""
        if not self._table_exists(request.table):
            raise _Rejected(UNKNOWN_TABLE, f"no Delta table {request.table!r} under {self.warehouse}")
        settings = self.config_for(request.table)
        if request.rule is not None:
            if request.rule not in {r.rule for r in settings.rules}:
                raise _Rejected(
                    UNKNOWN_RULE, f"table {request.table} has no rule {request.rule!r} configured"
                )
            self.attempt(request.table, origin="request", only_rule=request.rule)
            return
        try:
            plan = manual.plan(
                request.table, request.segment_ids, self.catalog.segments(request.table), settings
            )
        except ManualMergeError as exc:
            raise _Rejected(MANUAL_MERGE_REJECTED, str(exc)) from None
        self._execute(plan)

    def config_for(self, table: str) -> TableSettings:
        """The table's settings: a config published on the topic wins over the file's."""
        return self._applied.get(table) or self.config.for_table(table)

    def _table_exists(self, table: str) -> bool:
        if table not in self._known_tables and delta.table_exists(self.spark, self.warehouse, table):
            self._known_tables.add(table)
            if self.announced.get(table) is None:  # a table born while we run: announce all its merges
                self.announced.advance(table, -1)
        return table in self._known_tables

    # -- one attempt --------------------------------------------------------------

    def attempt(self, table: str, origin: str = "load", only_rule: str | None = None) -> list[MergeResult]:
        """Evaluate the table's on-load rules (or `only_rule`) once and execute the plans."""
        self.stats.attempts += 1
        self.stats.attempts_by_origin[origin] = self.stats.attempts_by_origin.get(origin, 0) + 1
        settings = self.config_for(table)
        evaluation = evaluate(
            table,
            self.catalog.segments(table),
            settings,
            self.clock(),
            only_rule=only_rule,
            explain=False,  # `compactor plan --explain` answers why; the hot path needs only plans
            invalid_counts=self._invalid_counts(table, settings, only_rule),
            index_facts=self._refresh_facts(table, settings, only_rule),
        )
        now = self.clock()
        plans = [p for p in evaluation.plans if self._cooling.get(p.plan_id, now) <= now]
        if not plans:
            self.stats.empty_attempts += 1
            return []
        fault_point(AFTER_PLANNING)
        return [self._execute(plan) for plan in plans]

    def _invalid_counts(
        self, table: str, settings: TableSettings, only_rule: str | None
    ) -> dict[str, int] | None:
        """Invalid rows per segment, scanned only when an upsert rule is about to run."""
        wanted = [
            r
            for r in settings.rules
            if r.rule == "upsert_compaction" and (only_rule or r.trigger == "on_load")
        ]
        if settings.upsert is None or not wanted or (only_rule and only_rule != "upsert_compaction"):
            return None
        return invalid_counts(self.spark, self.warehouse, table, settings.upsert)

    def _refresh_facts(
        self, table: str, settings: TableSettings, only_rule: str | None
    ) -> dict[str, refresh.IndexFacts] | None:
        """The index check of every segment, when a refresh rule that wants it is about to run."""
        wanted = [
            r
            for r in settings.rules
            if isinstance(r, RefreshRule)
            and not r.skip_index_check
            and (r.rule == only_rule or (not only_rule and r.trigger == "on_load"))
        ]
        if not wanted or settings.layout is None:
            return None
        return self._index_facts(table, settings, self.catalog.segments(table))

    def _execute(self, plan: MergePlan) -> MergeResult:
        records_in = sum(s.records for s in plan.inputs)
        bytes_in = sum(s.bytes for s in plan.inputs)
        try:
            outputs, done = self._refresh(plan) if plan.rule == refresh.RULE else self._merge(plan)
        except StalePlan as exc:  # a concurrent writer changed the inputs: re-plan from Delta
            log.warning("plan %s: %s; re-planning", plan.plan_id, exc)
            self.stats.replans += 1
            result = MergeResult(
                plan, MergeStatus.SKIPPED, records_in, 0, bytes_in, 0, 0, self.clock(), error=str(exc)
            )
            self.producer.send_all([self._result_message(result)])
            self._reload_table(plan.table)
            self.attempt(plan.table, origin="replan")
            return result
        except Exception as exc:  # report, never crash the stream on one plan
            if isinstance(exc, KeyboardInterrupt):
                raise
            log.exception("plan %s failed; not tried again for %s", plan.plan_id, FAILED_PLAN_COOLDOWN)
            self.stats.failed_merges += 1
            self._cooling[plan.plan_id] = self.clock() + FAILED_PLAN_COOLDOWN
            result = MergeResult(
                plan, MergeStatus.FAILED, records_in, 0, bytes_in, 0, 0, self.clock(), error=_short(exc)
            )
            self.producer.send_all([self._result_message(result)])
            return result
        if done.already_done:
            self.stats.replayed_merges += 1
        else:
            self.stats.merges += 1
        log.info(
            "table %s: %s merged %s -> %s (%s) at version %d",
            plan.table, plan.rule, ",".join(plan.input_ids), ",".join(o.id for o in outputs),
            plan.level or plan.pool or "-", done.version,
        )  # fmt: skip
        result = MergeResult(
            plan, MergeStatus.SUCCEEDED, records_in, done.records_out, bytes_in, done.bytes_out,
            done.duration_ms, self.clock(), table_version=done.version,
            invalid_rows_removed=records_in - done.records_out if plan.rule == "upsert_compaction" else 0,
            outputs=outputs if plan.rule == refresh.RULE else (), data_change=done.data_change,
        )  # fmt: skip
        self._announce(result, outputs)
        return result

    def _announce(self, result: MergeResult, outputs: Sequence[Segment]) -> None:
        """Emit the result, then each output's completion event (which triggers the next
        attempt), then remember the commit as announced. A crash in between repeats
        the announcement after restart, never skips it: consumers de-duplicate by plan id."""
        plan = result.plan
        self.producer.send_all([self._result_message(result)])
        fault_point(BETWEEN_EMITS)
        completed = [SegmentCompleted(o, self.clock(), plan_id=plan.plan_id) for o in outputs]
        self.producer.send_all(
            [
                (self.kafka.segments_topic, plan.table, self.codec.encode_segment_completed(c), None)
                for c in completed
            ]
        )
        if result.table_version is not None:
            self.announced.advance(plan.table, result.table_version)

    def _announce_unannounced(self) -> None:
        """After a crash between a commit and its events, announce what Delta holds but Kafka never heard."""
        for table, executed in self.catalog.history.items():
            floor = self.announced.get(table)
            if floor is None:  # first start with this state: the past is not ours to announce
                self.announced.advance(table, max((e.version for e in executed), default=-1))
                continue
            for e in sorted(executed, key=lambda e: e.version):
                if e.version <= floor:
                    continue
                log.warning(
                    "table %s: announcing plan %s (version %d) again after a restart",
                    table,
                    e.plan.plan_id,
                    e.version,
                )
                records_in = sum(s.records for s in e.plan.inputs)
                result = MergeResult(
                    e.plan, MergeStatus.SUCCEEDED, records_in, sum(s.records for s in e.outputs),
                    sum(s.bytes for s in e.plan.inputs), sum(s.bytes for s in e.outputs), 0, self.clock(),
                    table_version=e.version, outputs=e.outputs if e.plan.rule == refresh.RULE else (),
                    invalid_rows_removed=records_in - sum(s.records for s in e.outputs) if e.plan.rule == "upsert_compaction" else 0,
                    data_change=e.data_change,
                )  # fmt: skip
                self._announce(result, e.outputs)
        for table in self.catalog.tables:
            if self.announced.get(table) is None:
                self.announced.advance(table, -1)

    def _merge(self, plan: MergePlan) -> tuple[tuple[Segment, ...], delta.Execution]:
        upsert = self.config_for(plan.table).upsert
        done = self._in_pool(
            plan, lambda: self._retrying(plan, delta.execute_merge, self.spark, self.warehouse, plan, upsert)
        )
        fault_point(AFTER_COMMIT)
        output = replace(plan.output, records=done.records_out, bytes=done.bytes_out)
        self.catalog.apply_plan(plan, output)
        fault_point(AFTER_BOOKKEEPING)
        return (output,), done

    def _refresh(self, plan: MergePlan) -> tuple[tuple[Segment, ...], delta.Execution]:
        settings = self.config_for(plan.table)
        rule = next(r for r in settings.rules if isinstance(r, RefreshRule))
        assert settings.layout is not None
        facts = None if rule.skip_index_check else self._index_facts(plan.table, settings, plan.inputs)
        table_wide = any(
            set(refresh.drift(s, settings.layout, (facts or {}).get(s.id))) & refresh.TABLE_WIDE
            for s in plan.inputs
        )
        done = self._retrying(
            plan, execute_refresh, self.spark, self.warehouse, plan, settings.layout, rule,
            settings.config_version, table_wide,
        )  # fmt: skip
        outputs = done.outputs
        if done.already_done:  # a replay: what the earlier run wrote is in the Delta history
            rebuilt = delta.read_catalog(self.spark, self.warehouse, plan.table)
            outputs = tuple(
                s for s in rebuilt.segments(plan.table) if s.id.startswith(f"r-{plan.plan_id[:16]}")
            )
        fault_point(AFTER_COMMIT)
        self.catalog.apply_rewrite(plan, outputs)
        fault_point(AFTER_BOOKKEEPING)
        execution = delta.Execution(
            done.version, done.records_out, done.bytes_out, done.duration_ms, done.already_done,
            done.data_change,
        )  # fmt: skip
        return outputs, execution

    def _index_facts(
        self, table: str, settings: TableSettings, segments: Iterable[Segment]
    ) -> dict[str, refresh.IndexFacts]:
        """The index check per segment, cached: a segment's files never change."""
        assert settings.layout is not None
        key = settings.layout.model_dump_json()
        for s in segments:
            if (s.id, key) not in self._facts:
                self._facts[(s.id, key)] = index_facts(self.spark, self.warehouse, table, s, settings.layout)
        return {s.id: self._facts[(s.id, key)] for s in segments}

    def _in_pool(self, plan: MergePlan, work: Callable[[], T]) -> T:
        """Run `work` in the plan's FAIR scheduler pool, if it has one."""
        context = self.spark.sparkContext
        previous = context.getLocalProperty(POOL_PROPERTY)
        if plan.pool:
            context.setLocalProperty(POOL_PROPERTY, plan.pool)
        try:
            return work()
        finally:
            if plan.pool:
                context.setLocalProperty(POOL_PROPERTY, previous)  # type: ignore[arg-type]

    def _retrying(self, plan: MergePlan, fn: Callable[..., T], *args: Any) -> T:
        """Call `fn` retrying Delta conflicts with bounded exponential backoff."""

        def count_conflict(state: Any) -> None:
            self.stats.conflicts += 1
            log.warning("plan %s: Delta conflict, retry %d", plan.plan_id, state.attempt_number)

        def worth_retrying(exc: BaseException) -> bool:
            if not is_conflict(exc):
                return False
            present = delta.segments_with_rows(self.spark, self.warehouse, plan.table, list(plan.input_ids))
            if present != set(plan.input_ids):
                raise StalePlan(
                    f"inputs {sorted(set(plan.input_ids) - present)} changed under the plan"
                ) from exc
            return True

        run = retry(
            retry=retry_if_exception(worth_retrying),
            stop=stop_after_attempt(5),
            wait=wait_exponential(multiplier=0.2, max=5),
            before_sleep=count_conflict,
            reraise=True,
        )(fn)
        return run(*args)

    def _result_message(self, result: MergeResult) -> Message:
        return (self.kafka.results_topic, result.plan.table, self.codec.encode_merge_result(result), None)

    def _dead_letter(self, key: str, value: bytes, reason: str, detail: str, row: Any) -> Message:
        log.warning(
            "dead letter (%s) from %s[%s]@%s: %s", reason, row.topic, row.partition, row.offset, detail
        )
        headers = [
            (DEAD_LETTER_REASON_HEADER, reason.encode()),
            (DEAD_LETTER_DETAIL_HEADER, detail[:1000].encode()),
            ("compactor.source", f"{row.topic}/{row.partition}/{row.offset}".encode()),
        ]
        return (self.kafka.dead_letter_topic, key, value, headers)


class StalePlan(CompactorError):
    """A plan's inputs changed under it (a concurrent writer): it is re-planned."""


class _Rejected(CompactorError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:2000] + "..."

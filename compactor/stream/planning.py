"""Planning in the stream: one attempt of a table's rules, with the inputs they need.

The rules are pure; this gathers what they read from the tables (invalid rows
of upsert tables, the refresh index check), leaves out plans cooling down
after a failure, and stamps each plan with the table version it was made at.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import NamedTuple

from compactor.catalog.fold import SegmentCatalog
from compactor.config.off_peak import OffPeak
from compactor.config.rules import RefreshRule, RuleName
from compactor.config.tables import TableSettings
from compactor.delta.store import TableStore
from compactor.domain.columns import SegmentColumns
from compactor.domain.events import ProducerAdvice
from compactor.domain.layout import IndexFacts
from compactor.domain.plans import MergePlan
from compactor.domain.segments import Segment
from compactor.errors import DeadLetterReason, ManualMergeError, Rejected
from compactor.rules import manual
from compactor.rules.due import table_due
from compactor.rules.engine import evaluate, near_after
from compactor.stream.advice import ADVISE_EVERY, advise
from compactor.stream.control import Control
from compactor.stream.cool_down import CoolDown
from compactor.stream.due import DueTimes
from compactor.stream.key_indexes import NOTHING_KEPT, KeptRecords, KeyIndexes
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.scope import AttemptScope
from compactor.stream.stats import AttemptCounts
from compactor.stream.table_configs import TableConfigs
from compactor.stream.triggers import Trigger

log = logging.getLogger(__name__)


class Planned(NamedTuple):
    """An attempt's plans, and whether it looked at the whole table with every rule (its
    plans then replace the table's waiting ones)."""

    plans: list[MergePlan]
    whole: bool


class TablePlanner:
    """The plans one trigger makes for its table; how far each attempt looks is `AttemptScope`'s."""

    def __init__(
        self,
        catalog: SegmentCatalog,
        configs: TableConfigs,
        store: TableStore,
        control: Control,
        clock: Callable[[], datetime],
        cool_down: CoolDown,
        metrics: MetricsSink | None = None,
        scope: AttemptScope | None = None,
        defer_over_lag: int | None = None,
        off_peak: OffPeak | None = None,
        due: DueTimes | None = None,
        running: Callable[[str], Mapping[str, str]] = lambda table: {},
        kept: KeptRecords = NOTHING_KEPT,
        keys: KeyIndexes | None = None,
    ) -> None:
        self.catalog = catalog  # it notes each table's debt outlook with the table's mark
        self.configs = configs
        self.store = store
        self.control = control
        self.clock = clock
        self.cool_down = cool_down
        self.metrics = metrics or NoMetrics()
        self.counts = AttemptCounts()
        self.scope = scope or AttemptScope()
        self.keys = keys or KeyIndexes(catalog, store, kept)  # the job's, shared with its merge desk
        self.defer_over_lag = defer_over_lag  # admission control: see `_allowance`
        self.off_peak = off_peak  # optional merges run only inside it
        self.due = due if due is not None else DueTimes()
        self.running = running  # a table's segments in merges in flight (id -> plan id)
        self._advised: dict[str, datetime] = {}  # when each table's producers were last advised
        # table -> (segment id, what its files hold) -> its index check; live segments only
        self._facts: dict[str, dict[tuple[str, str], IndexFacts]] = {}
        self._stuck: set[str] = set()  # tables whose debt was last seen stuck

    def plans(self, trigger: Trigger) -> Planned:
        """A manual merge, or one evaluation of the table's rules (explain off: the hot path)."""
        table, catalog = trigger.table, self.catalog
        settings = self.configs.for_table(table)
        segments = catalog.columns(table)  # as columns: what the planners scan
        if trigger.merge_ids:
            self._invalid_counts(table, settings, None)  # the key index reads loads before any merge
            try:
                return Planned([manual.plan(table, trigger.merge_ids, segments, settings)], whole=False)
            except ManualMergeError as exc:
                raise Rejected(DeadLetterReason.MANUAL_MERGE_REJECTED, str(exc)) from None
        self.counts.attempted(trigger.origin)
        now = self.clock()
        allowance = self._allowance(table, settings, now)  # first: catching up widens the scope
        near = self.scope.near(trigger, now, lambda sid: catalog.get(table, sid))
        invalid_counts, recounted = self._invalid_counts(table, settings, trigger.only_rule)
        if near is not None and recounted:  # upsert: a load also changes the counts of others
            near += tuple(s for s in map(catalog.live(table).get, sorted(recounted)) if s)
        evaluation = evaluate(
            table,
            segments,
            settings,
            now,
            only_rule=trigger.only_rule,
            explain=False,  # `compactor plan --explain` answers why; the stream needs only plans
            invalid_counts=invalid_counts,
            index_facts=self._index_facts(table, settings, trigger.only_rule, segments),
            near=near,
            allowance=allowance,
            running=(running := self.running(table)),
        )
        self.metrics.on_attempt("full" if near is None else "near")
        plans = [p for p in evaluation.plans if not self.cool_down.active(p.plan_id)]
        self._note_due(table, settings, segments, near, now)
        if trigger.only_rule is None:  # every rule ran: what waits to merge (the table's debt)
            self.control.on_evaluation(table, evaluation.ready, full=near is None)
            # plans held back by a running merge (time layers merge one at a time) are work to
            # find: the next attempt looks at the whole table, not only near its event
            held = bool(evaluation.waiting) and bool(running)
            self.scope.evaluated(
                table, now, near, runnable=bool(plans) or held, narrow_next=near_after(plans) and not held
            )
        whole = near is None and trigger.only_rule is None
        if not plans:
            self.counts.empty_attempts += 1
            return Planned([], whole)
        version = self.store.latest_version(table)
        return Planned([replace(p, table_version=version) for p in plans], whole)

    def _note_due(
        self,
        table: str,
        settings: TableSettings,
        segments: SegmentColumns,
        near: tuple[Segment, ...] | None,
        now: datetime,
    ) -> None:
        """The table's next due time: derived from all its segments after a full evaluation;
        after one near an event, lowered to what the new segments bring."""
        since = self.due.computed_at(table) or now
        looked = segments if near is None else SegmentColumns.of(near)
        found = table_due(looked, settings, now, self.cool_down.cooling(table), self.off_peak, since)
        if near is None:
            self.due.set(table, found, now)
        else:
            self.due.lower(table, found)

    def _allowance(self, table: str, settings: TableSettings, now: datetime) -> float | None:
        """Bytes optional merges may rewrite: none while the job is more than `defer_over_lag`
        events behind (it must keep up with the events first) or outside the off-peak window,
        else what the table's write-amplification budget has left (None: no limit)."""
        lag = self.control.lag
        behind = self.defer_over_lag is not None and lag is not None and lag > self.defer_over_lag
        if behind != self.control.deferring:
            self.control.deferring = behind
            self.metrics.on_deferring(behind)
            if behind:
                log.warning("%d events behind: optional merges wait until the job catches up", lag)
            else:
                log.info("caught up (%s events behind): optional merges run again", lag)
                self.scope.unsettle()  # the merges that waited are found by full evaluations
        if behind or (self.off_peak is not None and not self.off_peak.contains(now)):
            return -math.inf  # nothing optional fits, however small
        return self.control.writes.allowance(table, now, settings.max_write_amplification)

    def read_debt(self, table: str) -> ProducerAdvice | None:
        """After an attempt's merges ran: the table's debt read into its trend; a table whose
        debt stopped falling is warned about once; after each full evaluation the outlook is
        kept with the table's mark (for `compactor status`), and the advice to the table's
        producers returned when small loads pile up (at most once an hour)."""
        now = self.clock()
        self.control.read_debt(table, now)
        outlook = self.control.outlook(table, now, self.configs.for_table(table).max_debt)
        if outlook is None:
            return None
        if outlook.stuck and table not in self._stuck:
            log.warning(
                "table %s: merge debt has not fallen for %d evaluations although the job keeps up "
                "(%d segments, %d bytes wait); see `compactor status` for failed plans",
                table,
                self.control.trend.stuck_after,
                outlook.segments,
                outlook.bytes,
            )
        self._stuck = (self._stuck | {table}) if outlook.stuck else (self._stuck - {table})
        if not self.scope.was_full(table):  # the outlook is kept, and advice given, after full ones
            return None
        doc = outlook.to_json() | {"at": now.isoformat(), "deferring_optional": self.control.deferring}
        self.catalog.note_debt_outlook(table, json.dumps(doc, sort_keys=True))
        return self._advice(table, now)

    def _advice(self, table: str, now: datetime) -> ProducerAdvice | None:
        limits = self.configs.for_table(table).producer_advice
        last = self._advised.get(table)
        if limits is None or (last is not None and now - last < ADVISE_EVERY):
            return None
        rate = self.control.ingest.loads_per_hour(table, now)
        found = advise(
            table,
            self.catalog.columns(table),
            limits.max_small_segments,
            limits.min_segment_size,
            rate,
            now,
        )
        if found is not None:
            self._advised[table] = now
        return found

    def _invalid_counts(
        self, table: str, settings: TableSettings, only_rule: str | None
    ) -> tuple[dict[str, int] | None, set[str]]:
        """For upsert compaction about to run: {}, as the counts are in the catalog's columns,
        which the key index notes; and the segments whose count may have changed. The index is
        kept current on every attempt of a table with the rule, so it has read every load a
        merge takes (it cannot follow a merge of rows it never read)."""
        rules = {r.rule for r in settings.rules}
        if settings.upsert is None or RuleName.UPSERT_COMPACTION not in rules:
            return None, set()
        recounted = self.keys.note(table, settings.upsert)
        return ({} if _runs(settings, RuleName.UPSERT_COMPACTION, only_rule) else None), recounted

    def _index_facts(
        self, table: str, settings: TableSettings, only_rule: str | None, segments: SegmentColumns
    ) -> Mapping[str, IndexFacts] | None:
        """The index check of each segment, when a refresh rule that wants it is about to run:
        done when the rule first asks for a segment (an attempt near new segments asks for a
        few), and cached per segment and layout, since a segment's files never change."""
        rule = next((r for r in settings.rules if isinstance(r, RefreshRule)), None)
        layout = settings.layout
        if (
            rule is None
            or rule.skip_index_check
            or layout is None
            or not _runs(settings, rule.rule, only_rule)
        ):
            return None
        sub_column = settings.sub_partition.column if settings.sub_partition else None
        key = f"{layout.model_dump_json()}|{sub_column}"
        live = self.catalog.live(table)
        # a merged-away segment is never checked again: its entries would only pile up
        facts = {k: v for k, v in self._facts.get(table, {}).items() if k[0] in live}
        self._facts[table] = facts

        def check(s: Segment) -> IndexFacts:
            # a segment's files change only when a sub-partition is added or refreshed
            cached = (s.id, f"{key}|{sorted(s.sub_partitions)}|{s.records}")
            if cached not in facts:
                facts[cached] = self.store.index_facts(table, s, layout, sub_column)
            return facts[cached]

        return _OnDemand(live, check)


class _OnDemand(Mapping[str, IndexFacts]):
    """A table's index facts by segment id, each found when first read."""

    def __init__(self, live: Mapping[str, Segment], check: Callable[[Segment], IndexFacts]) -> None:
        self._live, self._check = live, check

    def __getitem__(self, segment_id: str) -> IndexFacts:
        return self._check(self._live[segment_id])

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)


def _runs(settings: TableSettings, rule: str, only_rule: str | None) -> bool:
    """Will `rule` run in this attempt (asked for by name, or on load)?"""
    if only_rule is not None:
        return only_rule == rule and any(r.rule == rule for r in settings.rules)
    return any(r.rule == rule and r.trigger == "on_load" for r in settings.rules)

"""The announcer: results, the outputs' completion events, dead letters, and what a crash left unsaid.

Per plan, in order: the `MergeResult`; then each output's `SegmentCompleted`
(which triggers the next attempt); then the commit's version is remembered as
announced. A crash in between repeats the announcement after restart, never
skips it; a result the results topic already holds (read back at the restart) is not
produced twice, and beyond what is read back consumers de-duplicate by plan id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Protocol

from compactor.catalog.fold import ExecutedPlan, SegmentCatalog
from compactor.codec.events import Codec
from compactor.config.rules import RuleName
from compactor.domain.events import MergeResult, MergeStatus, ProducerAdvice, SegmentCompleted
from compactor.domain.plans import Commit
from compactor.errors import Fenced
from compactor.kafka.messages import (
    DEAD_LETTER_DETAIL_HEADER,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    Message,
)
from compactor.kafka.settings import KafkaSettings
from compactor.stream.control import Control
from compactor.stream.faults import BETWEEN_EMITS, fault_point
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.runner import RunOutcome
from compactor.stream.triggers import DeadLetter

log = logging.getLogger(__name__)


class Publisher(Protocol):
    def send_all(self, messages: Sequence[Message]) -> object:
        """Produce the messages in order; return once every one is acknowledged (else raise).
        What it returns (the Kafka producer says where each landed) is not used here."""


# (table, plan ids) -> those whose MergeResult the results topic holds already
ResultsOnTopic = Callable[[str, Collection[str]], set[str]]


class Announcer:
    def __init__(
        self,
        publisher: Publisher,
        codec: Codec,
        topics: KafkaSettings,
        catalog: SegmentCatalog,
        control: Control,
        clock: Callable[[], datetime],
        metrics: MetricsSink | None = None,
        on_topic: ResultsOnTopic | None = None,
    ) -> None:
        self.publisher = publisher
        self._fenced = False
        self.on_topic: ResultsOnTopic = on_topic or (lambda table, plan_ids: set())
        self.codec = codec
        self.topics = topics
        self.catalog = catalog  # it remembers, durably, which versions were announced
        self.control = control  # told of each merge's result (the debt, the write ledger)
        self.clock = clock
        self.metrics = metrics or NoMetrics()

    def fence(self) -> None:
        """The shard was lost: nothing more is published for it (its next holder announces)."""
        self._fenced = True

    def _send(self, messages: Sequence[Message]) -> None:
        if self._fenced:
            raise Fenced("the shard's lease was lost: nothing is published for it any more")
        self.publisher.send_all(messages)

    def announce(self, outcome: RunOutcome, result_sent: bool = False) -> None:
        """The plan's result (unless a crashed run's is on the topic already), then (if it
        committed) its outputs' completion events."""
        result = outcome.result
        plan = result.plan
        now = self.clock()
        self.control.on_merged(result, now)
        self.metrics.on_merge(result, now)
        if not result_sent:
            self._send([self._result_message(result)])
        if result.status is MergeStatus.FAILED:  # its commit may have landed all the same
            self.catalog.owe(plan.table, plan.plan_id)
        if result.status is not MergeStatus.SUCCEEDED:
            return
        self.catalog.settle(plan.table, plan.plan_id)
        fault_point(BETWEEN_EMITS)
        completed = [SegmentCompleted(o, self.clock(), plan_id=plan.plan_id) for o in outcome.outputs]
        self._send(
            [
                (self.topics.segments_topic, plan.table, self.codec.encode_segment_completed(c), None)
                for c in completed
            ]
        )
        if result.table_version is not None:
            self.catalog.mark_announced(plan.table, result.table_version)

    def dead_letters(self, dead: Sequence[DeadLetter]) -> None:
        """Each refused message, its original bytes and why, on the dead-letter topic."""
        if not dead:
            return
        messages: list[Message] = []
        for letter in dead:
            self.metrics.on_dead_letter(str(letter.reason))
            log.warning("dead letter (%s) from %s: %s", letter.reason, letter.envelope.source, letter.detail)
            headers = [
                (DEAD_LETTER_REASON_HEADER, str(letter.reason).encode()),
                (DEAD_LETTER_DETAIL_HEADER, letter.detail[:1000].encode()),
                (DEAD_LETTER_SOURCE_HEADER, letter.envelope.source.encode()),
            ]
            messages.append(
                (self.topics.dead_letter_topic, letter.envelope.key, letter.envelope.value, headers)
            )
        self._send(messages)

    def advise(self, advice: ProducerAdvice) -> None:
        """Advice to the table's producers, on the advice topic (keyed by table)."""
        log.warning("table %s: advice to its producers: %s", advice.table, advice.reason)
        value = self.codec.encode_producer_advice(advice)
        self._send([(self.topics.advice_topic, advice.table, value, None)])

    def table_appeared(self, table: str) -> None:
        """A table born while the job runs: every merge of it is ours to announce."""
        if self.catalog.announced(table) is None:
            self.catalog.mark_announced(table, -1)

    def announce_unannounced(self, tables: Iterable[str]) -> None:
        """Once the tables are caught up after a start: announce the merges Delta holds but Kafka
        never heard (a crash between a commit and its events). A table seen for the first time
        starts from its present."""
        for table in tables:
            executed = self.catalog.executed_plans(table)
            floor = self.catalog.announced(table)
            if floor is None:  # first start with this state: the past is not ours to announce
                self.catalog.mark_announced(table, max((e.version for e in executed), default=-1))
                continue
            pending = sorted((e for e in executed if e.version > floor), key=lambda e: e.version)
            # a job killed between its announcement and saving it: its results are not sent twice
            sent = self.on_topic(table, [e.plan.plan_id for e in pending]) if pending else set()
            for e in pending:
                log.warning(
                    "table %s: announcing plan %s (version %d) again after a restart%s",
                    table,
                    e.plan.plan_id,
                    e.version,
                    " (its result is on the topic already: its outputs' events only)"
                    if e.plan.plan_id in sent
                    else "",
                )
                self._announce_executed(e, result_sent=e.plan.plan_id in sent)

    def announce_owed(self, tables: Iterable[str]) -> None:
        """Once the tables' commits are folded: announce as SUCCEEDED each plan reported FAILED
        whose commit the log holds after all (an answer lost in an outage, a commit that beat its
        cancellation). A consumer hears the FAILED, then the SUCCEEDED that supersedes it."""
        for table in tables:
            for e in self.catalog.executed_plans(table):
                if not self.catalog.owes(table, e.plan.plan_id):
                    continue
                log.warning(
                    "table %s: plan %s was reported FAILED, but its commit is in the log (version %d): "
                    "announced as SUCCEEDED",
                    table,
                    e.plan.plan_id,
                    e.version,
                )
                self._announce_executed(e, result_sent=False)

    def _announce_executed(self, e: ExecutedPlan, result_sent: bool) -> None:
        """A plan whose commit the catalog folded from the log, announced as SUCCEEDED."""
        commit = Commit(
            e.version,
            e.outputs,
            sum(s.records for s in e.outputs),
            sum(s.bytes for s in e.outputs),
            data_change=e.data_change,
        )
        upsert = e.plan.rule == RuleName.UPSERT_COMPACTION
        self.announce(
            RunOutcome(MergeResult.succeeded(e.plan, commit, self.clock(), upsert), e.outputs),
            result_sent=result_sent,
        )

    def _result_message(self, result: MergeResult) -> Message:
        return (self.topics.results_topic, result.plan.table, self.codec.encode_merge_result(result), None)

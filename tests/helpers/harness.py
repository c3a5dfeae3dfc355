"""The stream wired to an in-memory store, a recording publisher and a clock the test moves."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from compactor.codec.events import Codec, default_codec
from compactor.config.loading import load_config
from compactor.domain.events import MergeStatus, SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.job.wiring import assemble
from compactor.kafka.settings import KafkaSettings
from compactor.observe.metrics.job_metrics import JobMetrics
from compactor.stream.handler import BatchHandler
from compactor.stream.merging.workers import InlineWorkers, Workers
from compactor.stream.outages import Outages
from compactor.stream.recovery import EAGER_TABLES
from compactor.stream.runner import RetryPolicy
from compactor.stream.triggers import Envelope
from tests.helpers.memory_store import InMemoryCatalogStore, InMemoryTableStore, RecordingPublisher

TOPICS = KafkaSettings("memory:0", "segments", "results", "dead")
DAY = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday


@dataclass
class Clock:
    now: datetime = datetime(2024, 6, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Harness:
    """The stream as the job runs it, minus Spark and Kafka."""

    tmp: Path
    store: InMemoryTableStore = field(default_factory=InMemoryTableStore)
    catalog_store: InMemoryCatalogStore = field(default_factory=InMemoryCatalogStore)
    publisher: RecordingPublisher = field(default_factory=RecordingPublisher)
    clock: Clock = field(default_factory=Clock)
    codec: Codec = field(default_factory=default_codec)
    sleeps: list[float] = field(default_factory=list)
    offset: int = 0

    def handler(
        self,
        config: dict[str, Any],
        workers: Workers | None = None,
        eager: int = EAGER_TABLES,
        outages: Outages | None = None,
    ) -> BatchHandler:
        """A handler as after a (re)start: recovered from the store and the state directory
        (`eager`: known tables caught up at once). Merges run where they start unless `workers`
        (threads) are given."""
        metrics = JobMetrics()
        handler = assemble(
            self.store, self.catalog_store, load_config(config), TOPICS, self.publisher, self.codec,
            self.clock, RetryPolicy(attempts=5), self.sleeps.append, metrics, workers or InlineWorkers(),
            on_topic=self.results_on_topic, eager=eager, outages=outages,
        )  # fmt: skip
        metrics.watch(handler.view())
        return handler

    def results_on_topic(self, table: str, plan_ids: Collection[str]) -> set[str]:
        """What reading the results topic back finds (`kafka.results_log`), from what was sent."""
        sent = {
            self.codec.decode_merge_result(m[2])["plan_id"]
            for m in self.publisher.on(TOPICS.results_topic)
            if m[1] == table
        }
        return sent & set(plan_ids)

    def day(
        self, n: int, sid: str | None = None, days: int = 1, records: int = 10, table: str = "t"
    ) -> Segment:
        start = DAY + timedelta(days=n)
        return Segment(
            sid or f"d{n:02d}", table, TimeRange(start, start + timedelta(days=days)), start, records
        )

    def loaded(self, *segments: Segment) -> list[Envelope]:
        """Load the segments into the store and return their completion events."""
        return [
            self.envelope(self.codec.encode_segment_completed(SegmentCompleted(self.store.load(s), DAY)))
            for s in segments
        ]

    def envelope(self, value: bytes, key: str = "t") -> Envelope:
        self.offset += 1
        return Envelope(key, value, f"segments/0/{self.offset}")

    def results(self) -> list[dict[str, Any]]:
        return [self.codec.decode_merge_result(m[2]) for m in self.publisher.on(TOPICS.results_topic)]

    def statuses(self) -> list[MergeStatus]:
        return [r["status"] for r in self.results()]

    def dead(self) -> list[tuple[str, str]]:
        """(reason, detail) of every dead letter."""
        return [
            (
                dict(m[3] or [])["compactor.dead_letter.reason"].decode(),
                dict(m[3] or [])["compactor.dead_letter.detail"].decode(),
            )
            for m in self.publisher.on(TOPICS.dead_letter_topic)
        ]

    def re_emitted(self) -> list[SegmentCompleted]:
        return [self.codec.decode_segment_completed(m[2]) for m in self.publisher.on(TOPICS.segments_topic)]


def between_batches(handler: BatchHandler) -> None:
    """What the job's threads do between batches, at once: a tick (what came due, what finished)
    and the upkeep (other writers' commits folded, key index snapshots, purges, checkpoints)."""
    handler.tick()
    handler.upkeep()
    handler.keep_logs()

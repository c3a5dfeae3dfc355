"""The results follower's de-duplication without a broker: each plan's outcome is given out once, and
a plan retried after a FAILED or SKIPPED result (it keeps its id) still gets its SUCCEEDED one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from compactor import ResultsFollower
from compactor.client import results as follower_module
from compactor.codec.events import default_codec
from compactor.domain.events import MergeResult, MergeStatus
from compactor.domain.plans import Commit, MergePlan, make_plan
from tests.helpers.segments import seg

AT = datetime(2024, 6, 1, tzinfo=UTC)
TOPIC = "compactor.results"


def plan(n: int) -> MergePlan:
    return make_plan("t", "minor", [seg(f"a{n}", "2024-01-01"), seg(f"b{n}", "2024-01-02")])


def result(n: int, status: MergeStatus) -> bytes:
    p = plan(n)
    if status is MergeStatus.SUCCEEDED:
        outcome = MergeResult.succeeded(p, Commit(10 + n, (p.output,), 10, 100), AT)
    else:
        outcome = MergeResult.unsuccessful(p, status, "the inputs changed", AT)
    return default_codec().encode_merge_result(outcome)


@dataclass
class Message:
    payload: bytes
    at: int

    def value(self) -> bytes:
        return self.payload

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.at


@dataclass
class Consumer:
    """Stands in for confluent_kafka's: hands out the records queued, then nothing."""

    queued: list[Message] = field(default_factory=list)
    committed_at: int = 0
    on_assign: Callable[[Any, list[TopicPartition]], None] | None = None

    def subscribe(self, topics: list[str], on_assign: Callable[[Any, list[TopicPartition]], None]) -> None:
        self.on_assign = on_assign

    def poll(self, timeout: float) -> Message | None:
        return self.queued.pop(0) if self.queued else None

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0, self.committed_at)]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.committed_at = offsets[0].offset

    def close(self) -> None:
        pass


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> Consumer:
    fake = Consumer()
    monkeypatch.setattr(follower_module, "Consumer", lambda settings: fake)
    return fake


def given_out(consumer: Consumer, records: Iterable[bytes]) -> list[tuple[str, MergeStatus]]:
    start = consumer.committed_at
    consumer.queued = [Message(r, start + n) for n, r in enumerate(records)]
    with ResultsFollower("cache", "localhost:9092", results_topic=TOPIC) as results:
        if consumer.on_assign is not None:
            consumer.on_assign(consumer, [TopicPartition(TOPIC, 0)])
        return [(r["plan_id"], r["status"]) for r in results.follow(idle_timeout=0.05)]


def test_a_success_after_a_failure_or_skip_of_the_same_plan_is_given_out(consumer: Consumer) -> None:
    failed, skipped, succeeded = MergeStatus.FAILED, MergeStatus.SKIPPED, MergeStatus.SUCCEEDED
    records = [
        result(0, failed),
        result(0, succeeded),  # plan 0 retried: same id, now committed
        result(1, skipped),
        result(1, succeeded),
        result(0, succeeded),  # a restarted job's copy
        result(0, failed),  # and of the failure
        result(2, succeeded),
    ]
    assert given_out(consumer, records) == [
        (plan(0).plan_id, failed),
        (plan(0).plan_id, succeeded),
        (plan(1).plan_id, skipped),
        (plan(1).plan_id, succeeded),
        (plan(2).plan_id, succeeded),
    ]


def test_a_restarted_follower_remembers_outcomes_not_plan_ids(
    consumer: Consumer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group handled plan 0's failure and stopped; the job retried plan 0, which committed: the
    restarted follower reads back what the group handled and still gives out the success."""
    assert given_out(consumer, [result(0, MergeStatus.FAILED)]) == [(plan(0).plan_id, MergeStatus.FAILED)]
    handled = {(plan(0).plan_id, MergeStatus.FAILED)}
    monkeypatch.setattr(follower_module, "outcomes_before", lambda *args: handled)
    records = [result(0, MergeStatus.FAILED), result(0, MergeStatus.SUCCEEDED)]
    assert given_out(consumer, records) == [(plan(0).plan_id, MergeStatus.SUCCEEDED)]

"""The job's shard loop against the lease's own callbacks (no broker): a gained shard starts, a
revoked one is stopped before the revocation returns, one revoked before it started never
starts, and a failed query or a lost lease stops every shard."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition

from compactor.errors import CompactorError, LeaseHeld
from compactor.kafka.lease import ControllerLease
from compactor.kafka.settings import KafkaSettings
from compactor.stream.shard_jobs import ShardedJob


class FakeShard:
    def __init__(self, index: int, log: list[str]) -> None:
        self.index = index
        self.log = log
        self.failed: str | None = None
        log.append(f"start {index}")

    def failure(self) -> str | None:
        return self.failed

    def stop(self, grace: float) -> int:
        time.sleep(0.2)  # a query stops between batches: not at once
        self.log.append(f"stop {self.index}")
        return 0


def partitions(*shards: int) -> list[TopicPartition]:
    return [TopicPartition("s.controller-4", shard) for shard in shards]


@pytest.fixture
def lease() -> ControllerLease:
    return ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh", shards=4)


def run_in_thread(job: ShardedJob, stopping: threading.Event) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            job.run(stopping, poll=0.05)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


def test_a_revocation_returns_only_after_the_shard_stopped(lease: ControllerLease) -> None:
    log: list[str] = []
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    stopping = threading.Event()
    thread, errors = run_in_thread(job, stopping)
    lease._assigned(None, partitions(0, 2))
    deadline = time.monotonic() + 5
    while len(job.running) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(job.running) == [0, 2]
    lease._revoked(None, partitions(2))  # on the lease's thread in real life: it waits
    assert log[-1] == "stop 2", "the shard stopped before the revocation returned"
    assert sorted(job.running) == [0] and lease.owned == {0}
    stopping.set()
    thread.join(5)
    assert not errors and log == ["start 0", "start 2", "stop 2", "stop 0"]


def test_a_shard_revoked_before_it_started_never_starts(lease: ControllerLease) -> None:
    log: list[str] = []
    lease._assigned(None, partitions(1, 3))
    lease._revoked(None, partitions(3))  # nobody supervises yet: no wait
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    job.apply_changes(0.1)
    assert log == ["start 1"]
    job.stop_all()


def test_a_failed_query_stops_the_job_and_its_other_shards(lease: ControllerLease) -> None:
    log: list[str] = []
    shards: dict[int, FakeShard] = {}

    def start(index: int) -> FakeShard:
        shards[index] = FakeShard(index, log)
        return shards[index]

    job = ShardedJob(lease, start, grace=1.0)
    lease._assigned(None, partitions(0, 1))
    job.apply_changes(0.1)
    shards[1].failed = "boom"
    with pytest.raises(CompactorError, match="shard 1: the streaming query failed: boom"):
        job.run(threading.Event(), poll=0.05)
    assert sorted(log[2:]) == ["stop 0", "stop 1"]


def test_a_lost_session_stops_every_shard_and_says_so(lease: ControllerLease) -> None:
    log: list[str] = []
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    stopping = threading.Event()
    lease._assigned(None, partitions(0))
    job.apply_changes(0.1)
    thread, errors = run_in_thread(job, stopping)
    lease._lost(None, partitions(0))
    thread.join(5)
    assert log == ["start 0", "stop 0"]
    assert len(errors) == 1 and isinstance(errors[0], LeaseHeld)
    assert "no shard runs in two jobs" in str(errors[0])


def test_one_shard_revoked_is_the_one_controllers_lease_lost() -> None:
    lease = ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh")
    lease._assigned(None, [TopicPartition("s.controller", 0)])
    assert lease.held.is_set() and not lease.lost.is_set()
    lease._revoked(None, [TopicPartition("s.controller", 0)])
    assert lease.lost.is_set() and not lease.held.is_set()

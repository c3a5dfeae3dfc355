"""The job's shard loop against the lease's own callbacks (no broker): a gained shard starts, a
revoked one is stopped before the revocation returns, one revoked before it started never
starts, a failed query starts again after a back-off, a lost session stops its shards at once
(fenced: no commit) and they start again when the group gives them back, and only another
live job under this one's identity stops the job."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition

from compactor.errors import LeaseHeld
from compactor.job import shard_jobs
from compactor.job.shard_jobs import ShardedJob
from compactor.kafka.lease import ControllerLease
from compactor.kafka.settings import KafkaSettings
from tests.helpers.tools import wait_until


class FakeShard:
    def __init__(self, index: int, log: list[str]) -> None:
        self.index = index
        self.log = log
        self.failed: str | None = None
        self.stop_fails = False
        log.append(f"start {index}")

    def failure(self) -> str | None:
        return self.failed

    def stop(self, grace: float, lost: bool = False) -> int:
        time.sleep(0.2)  # a query stops between batches: not at once
        self.log.append(f"{'lost' if lost else 'stop'} {self.index}")
        if self.stop_fails:
            raise OSError("s3a://warehouse/_compactor/catalog: connection refused")
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


def test_a_failed_query_starts_again_after_a_back_off_and_the_other_shards_run_on(
    lease: ControllerLease, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shard_jobs, "RESTART_FIRST_S", 0.3)
    log: list[str] = []
    shards: dict[int, FakeShard] = {}

    def start(index: int) -> FakeShard:
        shards[index] = FakeShard(index, log)
        return shards[index]

    job = ShardedJob(lease, start, grace=1.0)
    lease._assigned(None, partitions(0, 1))
    stopping = threading.Event()
    thread, errors = run_in_thread(job, stopping)
    wait_until(lambda: len(job.running) == 2, 5, "both shards")
    shards[1].failed = "broker gone"
    wait_until(lambda: log.count("start 1") == 2, 5, "shard 1 started again")
    assert log.count("stop 0") == 0, "shard 0 ran on"
    stopping.set()
    thread.join(5)
    assert not errors and log[2] == "stop 1"


def test_a_lost_session_stops_its_shards_at_once_and_they_start_again_when_they_come_back(
    lease: ControllerLease,
) -> None:
    log: list[str] = []
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    stopping = threading.Event()
    lease._assigned(None, partitions(0, 1))
    job.apply_changes(0.1)
    thread, errors = run_in_thread(job, stopping)
    lease._lost(None, partitions(0, 1))  # librdkafka's on_lost: waits for the stops
    assert sorted(log[2:]) == ["lost 0", "lost 1"], "stopped as lost (fenced), before the callback returned"
    assert lease.lost.is_set() and not lease.held.is_set() and thread.is_alive()
    assert [n.kind for n in lease.notes] == ["lost"]
    lease._assigned(None, partitions(0, 1))  # the group gives them back after the rejoin
    wait_until(lambda: len(job.running) == 2, 5, "the shards back")
    assert not lease.lost.is_set() and [n.kind for n in lease.notes] == ["lost", "rejoined"]
    assert lease.notes[-1].outage_s is not None and lease.counts == {"lost": 1, "rejoined": 1}
    stopping.set()
    thread.join(5)
    assert not errors and log[4:6] == ["start 0", "start 1"]


def test_the_watchdog_drops_the_shards_and_the_job_keeps_polling(lease: ControllerLease) -> None:
    log: list[str] = []
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    lease._assigned(None, partitions(2))
    job.apply_changes(0.1)
    lease._coordinator_seen = time.monotonic() - 60  # no coordinator for a whole session
    lease._stats('{"cgrp": {"state": "wait-coord"}}')
    assert lease._cut_off and "no group coordinator" in lease._cut_off_why
    lease._drop_all(lease._cut_off_why)  # what the poll loop does next
    job.apply_changes(0.1)
    assert log == ["start 2", "lost 2"] and lease.owned == set() and not lease.fenced.is_set()


def test_only_another_live_job_under_this_identity_stops_the_job(lease: ControllerLease) -> None:
    log: list[str] = []
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    lease._assigned(None, partitions(0))
    job.apply_changes(0.1)
    thread, errors = run_in_thread(job, threading.Event())
    lease._fence("compactor-run@elsewhere:7 (10.0.0.9) holds this job's instance id x")
    thread.join(5)
    assert log == ["start 0", "stop 0"]
    assert len(errors) == 1 and isinstance(errors[0], LeaseHeld)
    assert "holds this job's instance id x" in str(errors[0]) and "no shard runs in two jobs" in str(
        errors[0]
    )


def test_the_one_controllers_revocation_is_a_handover_not_a_loss() -> None:
    lease = ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh")
    lease._assigned(None, [TopicPartition("s.controller", 0)])
    assert lease.held.is_set() and not lease.lost.is_set()
    lease._revoked(None, [TopicPartition("s.controller", 0)])
    assert not lease.held.is_set() and not lease.lost.is_set() and not lease.fenced.is_set()


def test_a_lost_shard_stops_before_a_slow_warehouse_takes_the_note(lease: ControllerLease) -> None:
    """The lease's note of a loss goes to its listeners (one writes it to the warehouse): a slow
    write must not hold up the stop of shards another job may run already."""
    log: list[str] = []
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    lease._assigned(None, partitions(0))
    job.apply_changes(0.1)
    warehouse_slow = threading.Event()
    lease.listeners.append(lambda note: warehouse_slow.wait(10) if note.kind == "lost" else None)
    stopping = threading.Event()
    thread, errors = run_in_thread(job, stopping)
    dropping = threading.Thread(target=lease._drop, args=([0], "the group session was lost"), daemon=True)
    dropping.start()
    wait_until(lambda: "lost 0" in log, 5, "the stop while the note is still being written")
    assert dropping.is_alive(), "the note's write is still under way"
    warehouse_slow.set()
    dropping.join(5)
    stopping.set()
    thread.join(5)
    assert not errors


def test_a_dead_lease_thread_stops_every_shard_and_the_job(lease: ControllerLease) -> None:
    log: list[str] = []
    job = ShardedJob(lease, lambda i: FakeShard(i, log), grace=1.0)
    lease._assigned(None, partitions(0, 1))
    job.apply_changes(0.1)
    lease._thread = threading.Thread(target=lambda: None)  # the poll thread, ended on its own
    lease._thread.start()
    lease._thread.join()
    thread, errors = run_in_thread(job, threading.Event())
    thread.join(5)
    assert sorted(log[2:]) == ["lost 0", "lost 1"], "stopped as lost: nothing more written for them"
    assert len(errors) == 1 and isinstance(errors[0], LeaseHeld)
    assert "the lease's consumer thread ended on its own" in str(errors[0])


def test_a_restart_that_fails_in_recovery_is_tried_again_and_the_job_runs_on(
    lease: ControllerLease, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by bench/years.py: during an object-store outage a failed query's restart failed in
    its recovery (the catalog unreadable), and the error ended the whole job."""
    monkeypatch.setattr(shard_jobs, "RESTART_FIRST_S", 0.2)
    log: list[str] = []
    shards: dict[int, FakeShard] = {}
    store_down = [False]

    def start(index: int) -> FakeShard:
        if store_down[0]:
            log.append(f"recovery failed {index}")
            raise OSError("s3a://warehouse/_compactor/catalog: connection refused")
        shards[index] = FakeShard(index, log)
        return shards[index]

    job = ShardedJob(lease, start, grace=1.0)
    lease._assigned(None, partitions(0))
    stopping = threading.Event()
    thread, errors = run_in_thread(job, stopping)
    wait_until(lambda: len(job.running) == 1, 5, "the shard")
    store_down[0] = True
    shards[0].stop_fails = True  # its stop's last catalog save fails on the outage too
    shards[0].failed = "the object store is unreachable"
    wait_until(lambda: log.count("recovery failed 0") >= 2, 10, "tried again, twice")
    assert thread.is_alive() and not errors, "the job runs on"
    store_down[0] = False
    wait_until(lambda: log.count("start 0") == 2, 10, "back once the store answers")
    stopping.set()
    thread.join(5)
    assert not errors

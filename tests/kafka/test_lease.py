"""The controller lease on a real broker: one holder, a refused or waiting second, a dead holder's
lease passing on after its session."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from compactor.delta.paths import warehouse_uri
from compactor.errors import LeaseHeld
from compactor.kafka.lease import SESSION_TIMEOUT_MS, ControllerLease, lease_group
from compactor.kafka.settings import KafkaSettings
from tests.helpers.tools import wait_until

pytestmark = pytest.mark.integration

HOLD = """
import sys, time
from compactor.kafka.lease import ControllerLease
from compactor.kafka.settings import KafkaSettings
checkpoint = sys.argv[4] if len(sys.argv) > 4 else None
lease = ControllerLease(KafkaSettings(sys.argv[1], segments_topic=sys.argv[2]), sys.argv[3], checkpoint=checkpoint)
if checkpoint:  # long enough that a restart which waited it out is plain to see
    lease.session_timeout_ms = 45_000
lease.acquire(standby=False)
print("holding", lease.identity, lease.seat and lease.seat.instance_id, flush=True)
time.sleep(600)
"""


def hold_in_process(kafka: KafkaSettings, warehouse: str, *checkpoint: str) -> subprocess.Popen[str]:
    """A job holding the lease in a process of its own (to be SIGKILLed: no goodbye to the group)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, kafka.bootstrap_servers, kafka.segments_topic, warehouse, *checkpoint],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().startswith("holding compactor-run@")
    return holder


def standby_in_thread(lease: ControllerLease) -> tuple[threading.Thread, list[str]]:
    said: list[str] = []
    thread = threading.Thread(target=lease.acquire, args=(True, said.append), daemon=True)
    thread.start()
    return thread, said


def test_one_holder_a_refused_second_and_a_standby_that_takes_over_on_close(
    kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"))
    first = ControllerLease(kafka, str(tmp_path / "wh"))
    first.acquire(standby=False)
    assert first.held.is_set()
    try:
        refused = ControllerLease(kafka, str(tmp_path / "wh"))
        started = time.monotonic()
        with pytest.raises(LeaseHeld, match=rf"{first.identity} \(127\.0\.0\.1\) already runs for warehouse"):
            refused.acquire(standby=False)
        assert time.monotonic() - started < 15, "refused in seconds"

        other = ControllerLease(kafka, str(tmp_path / "other-wh"))  # another warehouse: its own lease
        other.acquire(standby=False)
        other.close()

        second = ControllerLease(kafka, str(tmp_path / "wh"))
        thread, said = standby_in_thread(second)
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.2)
        assert said == [f"standby: {first.identity} (127.0.0.1) holds the lease for {tmp_path / 'wh'}; "
                        "waiting for it to stop"]  # fmt: skip
        assert not second.held.is_set()
    finally:
        first.close()
    thread.join(timeout=30)
    assert second.held.is_set() and not first.lost.is_set(), "a clean stop hands the lease on"
    second.close()


def test_a_killed_holders_lease_passes_to_the_standby_after_its_session(
    kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"))
    warehouse = str(tmp_path / "wh")
    holder = hold_in_process(kafka, warehouse)
    try:
        standby = ControllerLease(kafka, warehouse)
        thread, said = standby_in_thread(standby)
        time.sleep(3)
        assert not standby.held.is_set()
        holder.kill()  # SIGKILL: no goodbye to the group
        killed = time.monotonic()
        thread.join(timeout=60)
        assert standby.held.is_set(), said
        waited = time.monotonic() - killed
        assert waited < SESSION_TIMEOUT_MS / 1000 + 20, f"took over {waited:.0f}s after the kill"
        assert said and said[0].startswith("standby: compactor-run@"), said
        standby.close()
    finally:
        holder.kill()
        holder.wait()


def test_a_job_restarted_after_a_kill_takes_its_lease_back_before_the_dead_session_ends(
    kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """Static membership: the restart (same host, same checkpoint) joins under its dead
    predecessor's name and is handed its shard at once; the dead session (45 s) never has to end.
    A second job beside a live one gets another seat, and is refused as before."""
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"))
    warehouse, checkpoint = str(tmp_path / "wh"), str(tmp_path / "cp")
    holder = hold_in_process(kafka, warehouse, checkpoint)
    try:
        beside = ControllerLease(kafka, warehouse, checkpoint=checkpoint)
        with pytest.raises(LeaseHeld, match="already runs for warehouse"):
            beside.acquire(standby=False)
        assert beside.seat is not None and beside.seat.number == 1, "the live job holds seat 0"
        holder.kill()
        holder.wait()
        killed = time.monotonic()
        restarted = ControllerLease(kafka, warehouse, checkpoint=checkpoint)
        restarted.acquire(standby=False)  # not refused, not waiting: the shard is its own again
        took = time.monotonic() - killed
        assert restarted.seat is not None and restarted.seat.number == 0
        assert restarted.held.is_set() and restarted.owned == {0}
        assert took < 20, f"took {took:.0f}s: the dead member's 45 s session was waited out"
        restarted.close()
    finally:
        holder.kill()
        holder.wait()


def test_the_group_is_named_by_the_warehouse_as_a_uri_and_the_topic(tmp_path: Path) -> None:
    kafka = KafkaSettings("127.0.0.1:1", segments_topic="s")
    relative = Path("wh")

    def group(warehouse: str, settings: KafkaSettings = kafka) -> str:
        return lease_group(settings, warehouse_uri(warehouse))  # as `compactor run` names it

    assert group(str(relative)) == group(str(relative.resolve()))
    assert group("s3a://b/wh/") == group("s3a://b/wh")
    assert group("s3a://b/wh") != group("s3a://b/other")
    assert group("s3a://b/wh") != group("s3a://b/wh", KafkaSettings("x:1", segments_topic="t"))
    assert group("s3a://b/wh").startswith("compactor-controller-")


def test_shards_are_split_between_jobs_and_a_leavers_pass_to_the_other(
    kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"))
    warehouse = str(tmp_path / "wh")
    first = ControllerLease(kafka, warehouse, shards=4)
    first.acquire(standby=False)
    assert first.owned == {0, 1, 2, 3} and first.topic == f"{kafka.segments_topic}.controller-4"
    first.supervised.set()  # a revocation waits until the job says the shard stopped
    stopped: list[int] = []

    def supervise() -> None:  # what the job's shard loop does with revocations
        while not first._stop.is_set():
            try:
                change = first.changes.get(timeout=0.2)
            except Exception:
                continue
            if not change.gained:
                time.sleep(0.5)  # the shard's query stops between batches
                stopped.append(change.shard)
            change.done.set()

    threading.Thread(target=supervise, daemon=True).start()
    second = ControllerLease(kafka, warehouse, shards=4)
    second.acquire(standby=False)  # not refused: the first hands shards over
    wait_until(lambda: len(first.owned) == 2 and len(second.owned) == 2, 30, "two shards each")
    assert first.owned.isdisjoint(second.owned)
    assert sorted(stopped) == sorted(second.owned), "each moved shard stopped in the first before it moved"
    owners = second.owners()
    assert sorted(owners) == [0, 1, 2, 3] and {owners[s].split(" ")[0] for s in second.owned} == {
        second.identity
    }

    first.close()  # a clean leave: its shards pass at once
    wait_until(lambda: second.owned == {0, 1, 2, 3}, 30, "the leaver's shards passed on")
    assert not second.lost.is_set()
    second.close()

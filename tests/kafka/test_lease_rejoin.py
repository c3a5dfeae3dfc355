"""The lease's consumer loop against scripted consumers (no broker): a fatal error, whether
`poll()` raises it or a message carries it, gets a new consumer under the same identity after
a back-off; another live job holding that identity fences this one; the group protocol is
pinned."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from compactor.kafka import lease as lease_module
from compactor.kafka.lease import GROUP_PROTOCOL, ControllerLease, _Fatal
from compactor.kafka.settings import KafkaSettings
from tests.helpers.tools import wait_until


class Message:
    def __init__(self, error: KafkaError) -> None:
        self._error = error

    def error(self) -> KafkaError:
        return self._error


class ScriptedConsumer:
    """Polls as scripted: each step returns a message, raises, or (when the script is done)
    returns nothing until the lease closes."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.closed = False

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.topics = topics

    def poll(self, timeout: float) -> Any:
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step
        threading.Event().wait(0.01)
        return None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def lease(monkeypatch: pytest.MonkeyPatch) -> Iterator[ControllerLease]:
    monkeypatch.setattr(lease_module, "REJOIN_BACKOFF_S", (0.01, 0.05))
    found = ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh", instance_id="job-a")
    yield found
    found._stop.set()


def fatal(code: int = KafkaError.FENCED_INSTANCE_ID) -> KafkaError:
    return KafkaError(code, "fenced by the group", fatal=True)


@pytest.mark.parametrize(
    "step",
    [
        KafkaException(fatal()),
        Message(KafkaError(KafkaError._FATAL, "fatal error: fenced", fatal=False)),  # #869
        Message(fatal()),
    ],
    ids=["raised", "message-_FATAL-not-flagged", "message-fatal"],
)
def test_a_fatal_error_however_it_comes_ends_the_consumer(lease: ControllerLease, step: Any) -> None:
    with pytest.raises(_Fatal):
        lease._serve(ScriptedConsumer([step]))


def test_a_retriable_error_from_poll_is_not_fatal(lease: ControllerLease) -> None:
    retriable = KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down", fatal=False))
    consumer = ScriptedConsumer([retriable, None])
    stop = threading.Timer(0.2, lease._stop.set)
    stop.start()
    lease._serve(consumer)  # returns at the stop, having survived the error


def test_a_fatal_error_rebuilds_the_consumer_under_the_same_identity(
    lease: ControllerLease, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[ScriptedConsumer] = [ScriptedConsumer([KafkaException(fatal())]), ScriptedConsumer([])]
    made: list[ScriptedConsumer] = []

    def consumer() -> ScriptedConsumer:
        made.append(built.pop(0))
        return made[-1]

    monkeypatch.setattr(lease, "_consumer", consumer)
    monkeypatch.setattr(lease, "_identity_holder", lambda live_here_only=False: None)
    thread = threading.Thread(target=lease._poll, daemon=True)
    thread.start()
    wait_until(lambda: len(made) == 2, 5, "a second consumer")
    assert made[0].closed and not lease.fenced.is_set()
    assert [n.kind for n in lease.notes] == ["rebuilt"] and "fenced by the group" in lease.notes[0].why
    lease._stop.set()
    thread.join(5)
    assert made[1].closed


def test_another_live_job_with_this_identity_fences_this_one(
    lease: ControllerLease, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease, "_consumer", lambda: ScriptedConsumer([KafkaException(fatal())]))
    monkeypatch.setattr(
        lease, "_identity_holder", lambda live_here_only=False: "compactor-run@b:9 (10.0.0.2)"
    )
    lease._poll()  # returns: fenced
    assert lease.fenced.is_set()
    assert lease.fenced_why == "compactor-run@b:9 (10.0.0.2) holds this job's instance id job-a"


def test_the_consumer_pins_the_classic_protocol_and_the_static_name() -> None:
    lease = ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh", instance_id="job-a")
    captured: dict[str, Any] = {}

    def consumer(config: dict[str, Any]) -> object:
        captured.update(config)
        return object()

    original = lease_module.Consumer
    lease_module.Consumer = consumer  # type: ignore[assignment,misc]
    try:
        lease._consumer()
    finally:
        lease_module.Consumer = original  # type: ignore[misc]
    assert captured["group.protocol"] == GROUP_PROTOCOL == "classic"
    assert captured["group.instance.id"] == "job-a" and lease.member_name == "job-a"


def test_an_unexpected_error_drops_the_shards_and_rebuilds_the_consumer(
    lease: ControllerLease, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease's thread must never die with shards held (they would run on without a lease)."""
    built: list[ScriptedConsumer] = [ScriptedConsumer([RuntimeError("a surprise")]), ScriptedConsumer([])]
    made: list[ScriptedConsumer] = []

    def consumer() -> ScriptedConsumer:
        made.append(built.pop(0))
        return made[-1]

    monkeypatch.setattr(lease, "_consumer", consumer)
    lease.owned = {0}
    thread = threading.Thread(target=lease._poll, daemon=True)
    lease._thread = thread
    thread.start()
    wait_until(lambda: len(made) == 2, 5, "a second consumer")
    assert lease.owned == set() and lease.changes.get(timeout=1).lost, "its shards dropped as lost"
    assert [n.kind for n in lease.notes] == ["lost", "rebuilt"] and lease.polling()
    lease._stop.set()
    thread.join(5)


class DescribedGroup:
    """What `AdminClient.describe_consumer_groups` gives for the lease's group: its members."""

    def __init__(self, members: list[Any]) -> None:
        self.members = members

    def result(self) -> DescribedGroup:
        return self


def test_a_dead_predecessors_name_left_in_the_group_is_not_a_holder(
    lease: ControllerLease, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A static member that takes its dead predecessor's name keeps the predecessor's client id
    in the group's description: found by bench/years.py, where a job fenced itself after a broker
    pause on its own predecessor's name, and exited."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    here = socket.gethostname()

    def member(client_id: str) -> Any:
        return SimpleNamespace(group_instance_id="job-a", client_id=client_id, host="/127.0.0.1")

    members: list[Any] = []

    class Admin:
        def __init__(self, config: dict[str, Any]) -> None:
            pass

        def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Any]:
            return {groups[0]: DescribedGroup(members)}

    monkeypatch.setattr(lease_module, "AdminClient", Admin)
    members[:] = [member(f"compactor-run@{here}:{ended.pid}"), member(lease.identity)]
    assert lease._identity_holder() is None, "an ended process of this host holds nothing"
    members[:] = [member(f"compactor-run@{here}:{os.getppid()}")]
    assert lease._identity_holder() == f"compactor-run@{here}:{os.getppid()} (127.0.0.1)"
    members[:] = [member("compactor-run@another-host:9")]
    assert lease._identity_holder() == "compactor-run@another-host:9 (127.0.0.1)", "another host: cannot tell"
    assert lease._identity_holder(live_here_only=True) is None

"""Who runs which shard of a warehouse and segments topic: leases kept as a Kafka consumer group.

Every `compactor run` joins one group (named from the warehouse, the topic and the shard count)
on a topic with one partition per shard; the partitions a job is assigned are the shards it
runs. With the cooperative-sticky assignor a newcomer takes only the shards the assignor moves
to it, the others' queries run on; the broker hands a job's shards on when it leaves (a clean
stop) or its session expires (a crash, SIGKILL, a lost network): no lock file, no clock shared
between hosts, and it works for any warehouse the job can write. With one shard (the default)
this is one controller per warehouse and topic.

A shard is given up only after the job stopped its query: the revocation waits for the
supervisor (`changes`), so a shard never runs in two jobs at once while both are alive.

A long-running job is a static member (`kafka/seat.py`): restarted after a crash on the same
host with the same checkpoint, it takes its dead predecessor's name and so its shards back at
once. The price is Kafka's: a static member does not leave on close, so the shards of a job
stopped cleanly pass to another job only after its session, unless it comes back first.

A lost session does not end the job. librdkafka rejoins the group by itself while the consumer
is polled, so the lease stops the shards it lost at once (their queries, and no commit after
the loss), keeps polling, and hands them back to the job when the group assigns them again. A
fatal error (the group fenced this member) gets a new consumer under the same identity, after a
jittered back-off; the job gives up only when another live job holds that identity.

The lease avoids doubled work, not corruption: two jobs that did merge at once would still
commit through Delta's optimistic concurrency, and one of the two would lose its commit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from compactor.errors import LeaseHeld
from compactor.kafka.seat import Seat, take_seat
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 10_000  # a dead holder's lease passes on this long after its last heartbeat
FIRST_ANSWER_S = 60.0  # how long to wait for the group's first answer (a crashed holder's session included)
SETTLE_S = 90.0  # with shards: how long a newcomer waits for the holders to hand some over
GIVE_UP_S = 120.0  # longest a revocation waits for the job to stop the shard's query
LOST_STOP_S = 30.0  # longest a lost shard's stop holds up the polling (the rejoin waits for it)
REJOIN_BACKOFF_S = (1.0, 30.0)  # a new consumer after a fatal error: first and longest wait
# Pinned: librdkafka's default group protocol is to become "consumer" (KIP-848), which refuses the
# session and heartbeat settings the lease depends on to notice a dead holder in seconds.
GROUP_PROTOCOL = "classic"


def lease_topic(settings: KafkaSettings, shards: int = 1) -> str:
    return f"{settings.segments_topic}.controller" + (f"-{shards}" if shards > 1 else "")


def lease_group(settings: KafkaSettings, warehouse_uri: str, shards: int = 1) -> str:
    """The group for one warehouse, topic and shard count. `warehouse_uri` is the warehouse as one
    canonical URI (`delta.paths.warehouse_uri`), so that two spellings of one warehouse share a
    lease; jobs with another shard count never share one (the shard record refuses them)."""
    key = f"{warehouse_uri}\n{settings.segments_topic}".encode()
    name = f"compactor-controller-{hashlib.sha256(key).hexdigest()[:16]}"
    return name + (f"-of-{shards}" if shards > 1 else "")


@dataclass(frozen=True, slots=True)
class ShardChange:
    """A shard gained or to be given up; `done` is set once the job has stopped its query.
    `lost`: the session that held it is gone (another job may run it already): stop at once,
    with no commit after."""

    shard: int
    gained: bool
    done: threading.Event = field(default_factory=threading.Event)
    lost: bool = False


@dataclass(frozen=True, slots=True)
class LeaseNote:
    """A lease event an operator sees (status, metrics): `lost` (shards gone, with why),
    `rejoined` (shards back, after `outage_s`), `rebuilt` (a new consumer after a fatal error)."""

    kind: str
    at: float  # epoch seconds
    shards: tuple[int, ...] = ()
    why: str = ""
    outage_s: float | None = None


class _Fatal(Exception):
    """librdkafka's consumer reported a fatal error: only a new consumer works."""


class _CutOff(Exception):
    """The watchdog gave the shards up: a new consumer joins afresh, so that the group assigns
    them again even when the old member's session turns out to have survived."""


class ControllerLease:
    """Join the group, wait for a first shard, keep what the group assigns (a daemon thread
    polls), give it back on close. Gains and revocations reach the job through `changes`.
    With `checkpoint` (the job's), it joins as a static member under its seat on this host."""

    def __init__(
        self,
        settings: KafkaSettings,
        warehouse_uri: str,
        shards: int = 1,
        checkpoint: str | None = None,
        instance_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.warehouse = warehouse_uri
        self.shards = shards
        self.group = lease_group(settings, warehouse_uri, shards)
        self.topic = lease_topic(settings, shards)
        self.identity = f"compactor-run@{socket.gethostname()}:{os.getpid()}"
        self.checkpoint = checkpoint
        self.seat: Seat | None = None
        self.instance_id = instance_id  # --instance-id: the static member's name, not a seat's
        self.held = threading.Event()  # at least one shard held
        self.lost = threading.Event()  # a session was lost since; cleared when shards come back
        self.fenced = threading.Event()  # another live job holds this one's identity: it must stop
        self.fenced_why = ""
        self.notes: list[LeaseNote] = []  # what happened to the lease, oldest first (the last 100)
        self.counts: dict[str, int] = {}  # notes by kind, since the job started
        self.listeners: list[Callable[[LeaseNote], None]] = []
        self._outage_since: float | None = None
        self.owned: set[int] = set()
        self.changes: queue.Queue[ShardChange] = queue.Queue()
        self.supervised = threading.Event()  # a job takes `changes`: a revocation waits for it
        self._answered = threading.Event()  # the group's first assignment arrived, shards or not
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.session_timeout_ms = SESSION_TIMEOUT_MS
        self._cut_off = False  # the watchdog found the session gone: the poll loop drops the shards
        self._cut_off_why = ""
        self._coordinator_seen = time.monotonic()  # when the stats last showed the coordinator up

    def acquire(self, standby: bool, waiting: Callable[[str], None] = log.info) -> None:
        """Return holding a shard. Without `standby`, raise LeaseHeld if live holders keep every
        shard; with it, wait (reporting the holders once) until one passes to us."""
        ensure_topics(self.settings, [self.topic], partitions=self.shards)  # one partition per shard
        if self.instance_id is None and self.checkpoint is not None:
            self.seat = take_seat(f"{self.group}\n{self.checkpoint}")
        holder = self._identity_holder(live_here_only=True)
        if holder is not None:
            if self.seat is not None:
                self.seat.release()
            raise LeaseHeld(
                f"instance id {self.member_name} is used by {holder}, a live job on this host; "
                "give this job another --instance-id"
            )
        self._thread = threading.Thread(target=self._poll, name="controller-lease", daemon=True)
        self._thread.start()
        if not self._answered.wait(FIRST_ANSWER_S):
            self.close()
            raise LeaseHeld(
                f"no answer from Kafka's group coordinator for {self.group} in {FIRST_ANSWER_S:.0f}s"
            )
        # with shards, a newcomer's first assignment is empty while the holders hand some over
        if self.held.is_set() or (self.shards > 1 and self.held.wait(SETTLE_S)):
            return
        holder = self.holder() or "another compactor"
        what = "holds the lease" if self.shards == 1 else f"and others hold all {self.shards} shards"
        if not standby:
            self.close()
            raise LeaseHeld(
                f"{holder} already runs for warehouse {self.warehouse} and topic {self.settings.segments_topic} "
                + (
                    "(one controller each)"
                    if self.shards == 1
                    else f"with every one of its {self.shards} shards"
                )
                + "; stop it, or start this one with --standby to take over when it stops"
            )
        waiting(f"standby: {holder} {what} for {self.warehouse}; waiting for it to stop")
        while not self.held.wait(1.0):
            if self.fenced.is_set() or (self._thread is not None and not self._thread.is_alive()):
                raise LeaseHeld(
                    self.fenced_why or f"the lease's consumer for {self.group} stopped while waiting"
                )

    @property
    def member_name(self) -> str | None:
        """The static member's name (`group.instance.id`): --instance-id, or the seat's."""
        return self.instance_id or (self.seat.instance_id if self.seat else None)

    def holder(self) -> str | None:
        """The client id of a member holding a shard, if the group says."""
        owners = self.owners()
        return next(iter(owners.values()), None) if owners else None

    def owners(self) -> dict[int, str]:
        """Shard -> the member that holds it, as the group describes itself (empty if unknown)."""
        return group_owners(self.settings, self.group)

    def close(self) -> None:
        """Leave the group, so that the shards pass on at once rather than after the session."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=GIVE_UP_S)
        if self.seat is not None:
            self.seat.release()

    def _consumer(self) -> Any:
        name = self.member_name
        return Consumer(
            self.settings.librdkafka(
                **{
                    "group.id": self.group,
                    "group.protocol": GROUP_PROTOCOL,
                    "client.id": self.identity,
                    "partition.assignment.strategy": "cooperative-sticky",
                    "session.timeout.ms": self.session_timeout_ms,
                    "heartbeat.interval.ms": self.session_timeout_ms // 5,
                    "max.poll.interval.ms": int(GIVE_UP_S * 1000) + 60_000,
                    "enable.auto.commit": False,
                    # the watchdog's view of the group coordinator (see _stats)
                    "statistics.interval.ms": 1000,
                    "stats_cb": self._stats,
                }
                | ({"group.instance.id": name} if name else {})
            )
        )

    def _poll(self) -> None:
        """Poll until closed. A fatal error closes the consumer and builds a new one under the
        same identity, after a jittered back-off; the loop ends early only when another live job
        holds that identity (`fenced`)."""
        failures = 0
        while not self._stop.is_set():
            consumer = self._consumer()
            self._coordinator_seen = time.monotonic()  # a new consumer's stats start from now
            self._cut_off = False  # a verdict on the old consumer's session says nothing of this one
            try:
                consumer.subscribe(
                    [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
                )
                self._serve(consumer)
                return
            except _CutOff:
                continue  # at once: the shards are already stopped
            except _Fatal as fatal:
                self._drop_all(f"the consumer's fatal error: {fatal}")
                holder = self._identity_holder()
                if holder is not None:
                    self._fence(f"{holder} holds this job's instance id {self.member_name}")
                    return
                failures += 1
                self._rebuild_after(failures, str(fatal))
            except (
                Exception
            ) as exc:  # a bug or a library's surprise: the thread must not die with the shards held
                log.exception("controller lease %s: its consumer failed", self.group)
                self._drop_all(f"the lease's consumer failed: {type(exc).__name__}: {exc}")
                failures += 1
                self._rebuild_after(failures, f"{type(exc).__name__}: {exc}")
            finally:
                consumer.close()  # a revocation of what we hold runs here, and waits for the job

    def _rebuild_after(self, failures: int, why: str) -> None:
        """Wait a jittered back-off, doubling with each failure in a row, before a new consumer."""
        first, longest = REJOIN_BACKOFF_S
        delay = min(longest, first * 2 ** (failures - 1)) * random.uniform(0.5, 1.5)
        self._note(LeaseNote("rebuilt", time.time(), why=f"{why}; a new consumer in {delay:.1f}s"))
        self._stop.wait(delay)

    def polling(self) -> bool:
        """The lease's thread is alive (or was never started, or was closed on purpose). False
        only when it died on its own: the shards then run without a lease."""
        return self._thread is None or self._thread.is_alive() or self._stop.is_set() or self.fenced.is_set()

    def _serve(self, consumer: Any) -> None:
        """Poll (running the callbacks; nobody produces to the topic) until closed."""
        while not self._stop.is_set():
            try:
                message = consumer.poll(0.5)
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():
                    raise _Fatal(error.str()) from exc
                log.warning("controller lease %s: %s", self.group, error.str())
                continue
            error = message.error() if message is not None else None
            # a message can carry the fatal error with fatal() False (confluent-kafka-python #869)
            if error is not None and (error.fatal() or error.code() == KafkaError._FATAL):
                raise _Fatal(error.str())
            if self._cut_off:  # the watchdog: the broker has given our shards away by now
                self._drop_all(self._cut_off_why)
                raise _CutOff

    def _assigned(self, _: Any, partitions: list[TopicPartition]) -> None:
        gained = sorted(p.partition for p in partitions)
        with self._lock:
            self.owned.update(gained)
        for shard in gained:  # cooperative: an increment; empty when a rebalance left ours unchanged
            self.changes.put(ShardChange(shard, gained=True))
        if gained:
            self._coordinator_seen = time.monotonic()  # just assigned: the coordinator answered
            self._cut_off = False
            self.held.set()
            log.info("holding shard(s) %s of %s as %s", gained, self.group, self.identity)
            if self._outage_since is not None:
                outage = time.monotonic() - self._outage_since
                self._outage_since = None
                self.lost.clear()
                self._note(LeaseNote("rejoined", time.time(), tuple(gained), outage_s=outage))
                log.warning("rejoined %s: shard(s) %s back after %.0fs", self.group, gained, outage)
        self._answered.set()

    def _revoked(self, _: Any, partitions: list[TopicPartition]) -> None:
        """Give shards up: wait until the job stopped their queries (it checks `owned` before it
        starts one, so a shard revoked before it started never starts)."""
        given = sorted(p.partition for p in partitions)
        with self._lock:
            self.owned.difference_update(given)
            if not self.owned:
                self.held.clear()
        changes = [ShardChange(shard, gained=False) for shard in given]
        for change in changes:
            self.changes.put(change)
        if self._stop.is_set():  # closing: the job stopped its queries first
            return
        if self.supervised.is_set():
            for change in changes:
                if not change.done.wait(GIVE_UP_S):
                    log.error(
                        "shard %d: its query did not stop in %.0fs; giving it up anyway",
                        change.shard,
                        GIVE_UP_S,
                    )
        if given:
            log.info("gave up shard(s) %s of %s", given, self.group)

    def _lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """librdkafka lost the session that held these: stop them now, rejoin while polling."""
        if not self._stop.is_set():
            self._drop([p.partition for p in partitions], "the group session was lost")

    def _drop_all(self, why: str) -> None:
        with self._lock:
            owned = sorted(self.owned)
        self._drop(owned, why)

    def _drop(self, shards: list[int], why: str) -> None:
        """Shards gone with the session: the job stops them at once (waited for, within
        `LOST_STOP_S`, so that none runs here once polling resumes)."""
        with self._lock:
            gone = sorted(set(shards) & self.owned)
            self.owned.difference_update(gone)
            if not self.owned:
                self.held.clear()
        if not gone:
            return
        if self._outage_since is None:
            self._outage_since = time.monotonic()
        self.lost.set()
        # the stop first: the note goes to the listeners (one writes it to the warehouse), and a
        # slow warehouse must not hold up the stop of shards another job may run already
        changes = [ShardChange(shard, gained=False, lost=True) for shard in gone]
        for change in changes:
            self.changes.put(change)
        log.error(
            "lost shard(s) %s of %s at %s: %s; rejoining", gone, self.group, time.strftime("%H:%M:%S"), why
        )
        self._note(LeaseNote("lost", time.time(), tuple(gone), why=why))
        if self.supervised.is_set():
            for change in changes:
                change.done.wait(LOST_STOP_S)

    def _note(self, note: LeaseNote) -> None:
        self.notes = [*self.notes[-99:], note]
        self.counts[note.kind] = self.counts.get(note.kind, 0) + 1
        for listener in self.listeners:
            try:
                listener(note)
            except Exception:  # a listener (metrics, the record) never stops the lease
                log.exception("controller lease %s: a listener failed on %s", self.group, note.kind)

    def _stats(self, text: str) -> None:
        """A watchdog beside librdkafka's own: with shards held and no group coordinator for a
        whole session, the broker has given them to others, whether or not librdkafka has
        said so yet (under load it was seen not to for 40 s): step down now."""
        now = time.monotonic()
        if (json.loads(text).get("cgrp") or {}).get("state") == "up" or not self.owned:
            self._coordinator_seen = now
        elif (now - self._coordinator_seen) * 1000 >= self.session_timeout_ms:
            away = now - self._coordinator_seen
            self._cut_off_why = f"no group coordinator for {away:.0f}s, past the {self.session_timeout_ms / 1000:.0f}s session"
            self._cut_off = True

    def _fence(self, why: str) -> None:
        """Another live job holds this one's identity: it must stop (exit 4)."""
        with self._lock:
            self.owned.clear()
            self.held.clear()
        self.fenced_why = why
        self.fenced.set()
        self._answered.set()
        log.error("controller lease %s: %s; stopping", self.group, why)

    def _identity_holder(self, live_here_only: bool = False) -> str | None:
        """Another member of the group under this job's static name, if any (`client id
        (host)`). A member named after a process of this host that has ended is never one: a
        static member that takes a dead predecessor's name keeps its client id in the group's
        description (bench/years.py: a job fenced itself after a broker pause, on its own
        predecessor's name). `live_here_only`: only one that is a live process on this host."""
        name = self.member_name
        if name is None:
            return None
        admin = AdminClient(self.settings.librdkafka())
        try:
            (future,) = admin.describe_consumer_groups([self.group], request_timeout=10).values()
            members = future.result().members
        except KafkaException:
            return None
        for member in members:
            if getattr(member, "group_instance_id", None) != name or member.client_id == self.identity:
                continue
            if _dead_here(member.client_id) or (live_here_only and not _live_here(member.client_id)):
                continue
            return _member_name(member)
        return None


def group_owners(settings: KafkaSettings, group: str) -> dict[int, str]:
    """Shard -> `client id (host)` of the member assigned its partition, as the group says."""
    admin = AdminClient(settings.librdkafka())
    try:
        (future,) = admin.describe_consumer_groups([group], request_timeout=10).values()
        described = future.result()
    except KafkaException:
        return {}
    return {
        tp.partition: _member_name(member)
        for member in described.members
        if member.assignment
        for tp in member.assignment.topic_partitions
    }


def running_counts(settings: KafkaSettings, warehouse_uri: str) -> dict[int, list[str]]:
    """Shard count -> the members of its group that are alive now, for every count this
    warehouse and topic have had a controller topic for."""
    admin = AdminClient(settings.librdkafka())
    prefix = lease_topic(settings)
    counts = [1] + [
        int(name.removeprefix(prefix + "-"))
        for name in admin.list_topics(timeout=10).topics
        if name.startswith(prefix + "-") and name.removeprefix(prefix + "-").isdigit()
    ]
    groups = {n: lease_group(settings, warehouse_uri, n) for n in counts}
    try:
        described = admin.describe_consumer_groups(list(groups.values()), request_timeout=10)
    except KafkaException:
        return {}
    found: dict[int, list[str]] = {}
    for n, group in groups.items():
        try:
            members = described[group].result().members
        except KafkaException:
            continue
        if members:
            found[n] = [_member_name(m) for m in members]
    return found


def _alive_here(client_id: str) -> bool | None:
    """Whether the job named `compactor-run@<host>:<pid>` is a live process; None when it is not
    another process of this host (another host's, this one, or not such a name)."""
    host, _, pid = client_id.removeprefix("compactor-run@").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_here(client_id: str) -> bool:
    """Is the job named `compactor-run@<host>:<pid>` a live process on this host?"""
    return _alive_here(client_id) is True


def _dead_here(client_id: str) -> bool:
    """Is the job named `compactor-run@<host>:<pid>` a process of this host that has ended?"""
    return _alive_here(client_id) is False


def _member_name(member: Any) -> str:
    """A group member as the operator reads it: `client id (host)`."""
    return f"{member.client_id} ({member.host.lstrip('/')})"

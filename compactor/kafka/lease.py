"""One controller per warehouse and segments topic: a lease kept as a Kafka consumer group.

Every `compactor run` joins one group (named from the warehouse and the topic) on a one-partition
topic; whoever is assigned the partition holds the lease. With the cooperative-sticky assignor a
newcomer never takes the partition from a live holder, and the broker hands it on when the holder
leaves (a clean stop) or its session expires (a crash, SIGKILL, a lost network): no lock file, no
clock shared between hosts, and it works for any warehouse the job can write.

The lease avoids doubled work, not corruption: two jobs that did merge at once would still
commit through Delta's optimistic concurrency, and one of the two would lose its commit.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from compactor.errors import LeaseHeld
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 10_000  # a dead holder's lease passes on this long after its last heartbeat
FIRST_ANSWER_S = 60.0  # how long to wait for the group's first answer (a crashed holder's session included)


def lease_topic(settings: KafkaSettings) -> str:
    return f"{settings.segments_topic}.controller"


def lease_group(settings: KafkaSettings, warehouse_uri: str) -> str:
    """The group for one warehouse and topic. `warehouse_uri` is the warehouse as one canonical
    URI (`delta.paths.warehouse_uri`), so that two spellings of one warehouse share a lease."""
    key = f"{warehouse_uri}\n{settings.segments_topic}".encode()
    return f"compactor-controller-{hashlib.sha256(key).hexdigest()[:16]}"


class ControllerLease:
    """Join the group, wait for the lease, keep it (a daemon thread polls), give it back on close."""

    def __init__(self, settings: KafkaSettings, warehouse_uri: str) -> None:
        self.settings = settings
        self.warehouse = warehouse_uri
        self.group = lease_group(settings, warehouse_uri)
        self.topic = lease_topic(settings)
        self.identity = f"compactor-run@{socket.gethostname()}:{os.getpid()}"
        self.held = threading.Event()
        self.lost = threading.Event()  # held once, then taken away (a lost session, a fence)
        self._answered = threading.Event()  # the group's first assignment arrived, lease or not
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, standby: bool, waiting: Callable[[str], None] = log.info) -> None:
        """Return holding the lease. Without `standby`, raise LeaseHeld if a live holder has it;
        with it, wait (reporting the holder once) until the lease passes to us."""
        ensure_topics(self.settings, [self.topic], partitions=1)  # one partition: one holder
        self._thread = threading.Thread(target=self._poll, name="controller-lease", daemon=True)
        self._thread.start()
        if not self._answered.wait(FIRST_ANSWER_S):
            self.close()
            raise LeaseHeld(
                f"no answer from Kafka's group coordinator for {self.group} in {FIRST_ANSWER_S:.0f}s"
            )
        if self.held.is_set():
            return
        holder = self.holder() or "another compactor"
        if not standby:
            self.close()
            raise LeaseHeld(
                f"{holder} already runs for warehouse {self.warehouse} and topic {self.settings.segments_topic} "
                "(one controller each); stop it, or start this one with --standby to take over when it stops"
            )
        waiting(f"standby: {holder} holds the lease for {self.warehouse}; waiting for it to stop")
        while not self.held.wait(1.0):
            if self._thread is not None and not self._thread.is_alive():
                raise LeaseHeld(f"the lease's consumer for {self.group} stopped while waiting")

    def holder(self) -> str | None:
        """The client id of the member holding the partition, if the group says."""
        admin = AdminClient(self.settings.librdkafka())
        try:
            (future,) = admin.describe_consumer_groups([self.group], request_timeout=10).values()
            group = future.result()
        except KafkaException:
            return None
        for member in group.members:
            if member.assignment and member.assignment.topic_partitions:
                return f"{member.client_id} ({member.host.lstrip('/')})"
        return None

    def close(self) -> None:
        """Leave the group, so a standby takes over at once rather than after the session."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=SESSION_TIMEOUT_MS / 1000)

    def _poll(self) -> None:
        consumer = Consumer(
            self.settings.librdkafka(
                **{
                    "group.id": self.group,
                    "client.id": self.identity,
                    "partition.assignment.strategy": "cooperative-sticky",
                    "session.timeout.ms": SESSION_TIMEOUT_MS,
                    "heartbeat.interval.ms": SESSION_TIMEOUT_MS // 5,
                    "enable.auto.commit": False,
                }
            )
        )
        consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._taken, on_lost=self._taken)
        try:
            while not self._stop.is_set():
                consumer.poll(0.5)  # runs the callbacks; nobody produces to the topic
        finally:
            consumer.close()

    def _assigned(self, _: Any, partitions: list[TopicPartition]) -> None:
        if partitions:  # cooperative: an increment; empty when a rebalance left ours unchanged
            self.held.set()
            log.info("holding the controller lease %s as %s", self.group, self.identity)
        self._answered.set()

    def _taken(self, _: Any, partitions: list[TopicPartition]) -> None:
        if partitions and self.held.is_set():
            self.held.clear()
            if self._stop.is_set():  # given back on close
                return
            self.lost.set()
            log.error("lost the controller lease %s at %s", self.group, time.strftime("%H:%M:%S"))

"""The console's controls: each publishes the control event the CLI sends (`compactor table
disable|enable|cancel`, `compactor request`) on the segments topic, keyed by its table, so the
job takes it in order with the table's loads, through its own path and records. The console
remembers what it sent and tells, from what the job shows afterwards, whether it was taken."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from compactor.codec.events import Codec
from compactor.domain.clock import now_utc
from compactor.domain.events import CompactionRequested
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.observe.console.snapshot import MergeRow

GIVE_UP = timedelta(minutes=10)  # a request with no visible outcome by then is reported so


@dataclass(frozen=True, slots=True)
class Sent:
    request_id: str
    table: str
    kind: str  # disable, enable, request, cancel
    at: datetime
    rule: str | None = None
    plan_id: str | None = None

    def describe(self) -> str:
        what = {
            "disable": "turn merging off",
            "enable": "turn merging on",
            "request": f"run {self.rule or 'its rules'} now",
            "cancel": f"cancel merge {self.plan_id}",
        }[self.kind]
        return f"{what} on {self.table} (request {self.request_id})"


@dataclass(frozen=True, slots=True)
class Outcome:
    done: bool
    text: str


class Controls:
    """Publishes control events and follows what became of them."""

    def __init__(
        self,
        kafka: KafkaSettings,
        codec: Codec,
        producer: Callable[[KafkaSettings], EventProducer] = EventProducer,
        clock: Callable[[], datetime] = now_utc,
    ) -> None:
        self.kafka = kafka
        self.codec = codec
        self._producer = producer
        self.clock = clock
        self._sent: dict[str, Sent] = {}
        self._lock = threading.Lock()
        self._open: EventProducer | None = None

    def disable(self, table: str) -> Sent:
        return self._send(Sent(_id(), table, "disable", self.clock()), merging=False)

    def enable(self, table: str) -> Sent:
        return self._send(Sent(_id(), table, "enable", self.clock()), merging=True)

    def request(self, table: str, rule: str | None) -> Sent:
        return self._send(Sent(_id(), table, "request", self.clock(), rule=rule), rule=rule)

    def cancel(self, table: str, plan_id: str) -> Sent:
        return self._send(Sent(_id(), table, "cancel", self.clock(), plan_id=plan_id), cancel_plan=plan_id)

    def sent(self, request_id: str) -> Sent | None:
        with self._lock:
            return self._sent.get(request_id)

    def outcome(self, sent: Sent, merging: bool | None, merges: list[MergeRow]) -> Outcome:
        """What became of a request, from the table's switch now (`merging`, None: the table is
        gone) and its newest results: done, or still waiting for the job."""
        if sent.kind in {"disable", "enable"}:
            wanted = sent.kind == "enable"
            if merging is wanted:
                return Outcome(True, f"taken: merging on {sent.table} is {'on' if wanted else 'off'}")
        elif sent.kind == "cancel":
            found = next((m for m in merges if m.plan_id == sent.plan_id and m.at and m.at >= sent.at), None)
            if found is not None:
                return Outcome(True, f"merge {found.plan_id}: {found.status} ({found.error or 'done'})")
        else:
            after = [m for m in merges if m.at is not None and m.at >= sent.at]
            if after:
                m = after[-1]  # the first result after the request (merges come newest first)
                return Outcome(True, f"merge {m.plan_id} ({m.rule}): {m.status}")
        if self.clock() - sent.at > GIVE_UP:
            return Outcome(True, f"no outcome seen {GIVE_UP} after the request: see the job's log")
        return Outcome(False, "sent; waiting for the job to take it")

    def close(self) -> None:
        with self._lock:
            if self._open is not None:
                self._open.close()
                self._open = None

    def _send(self, sent: Sent, **fields: object) -> Sent:
        event = CompactionRequested(sent.request_id, sent.table, sent.at, **fields)  # type: ignore[arg-type]
        value = self.codec.encode_compaction_requested(event)
        with self._lock:
            if self._open is None:
                self._open = self._producer(self.kafka)
            self._open.send_all([(self.kafka.segments_topic, sent.table, value, None)])
            self._sent[sent.request_id] = sent
        return sent


def _id() -> str:
    return uuid.uuid4().hex

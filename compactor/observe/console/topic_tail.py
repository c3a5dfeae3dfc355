"""The newest merge results and dead letters, followed from their topics in a daemon thread.

Each partition is read from `keep` records before its end, then followed; the last `keep` of
each kind stay in memory for the console's pages. A record that does not decode is skipped
(the console shows what it can read; `compactor events tail` names what it cannot).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections import deque
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from compactor.codec.events import Codec
from compactor.errors import CompactorError
from compactor.kafka.messages import (
    DEAD_LETTER_DETAIL_HEADER,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
)
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import partition_count
from compactor.observe.console.snapshot import DeadLetterRow, MergeRow

log = logging.getLogger(__name__)

KEEP = 500  # of each kind


class TopicTail:
    def __init__(self, kafka: KafkaSettings, codec: Codec, keep: int = KEEP) -> None:
        self.kafka = kafka
        self.codec = codec
        self.keep = keep
        self._merges: deque[MergeRow] = deque(maxlen=keep)
        self._dead: deque[DeadLetterRow] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.problem: str | None = None  # why the topics cannot be read now (None: they can)

    def start(self) -> TopicTail:
        self._thread = threading.Thread(target=self._follow, name="compactor-console-tail", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def merges(self, table: str | None = None) -> list[MergeRow]:
        """The newest results first (a table's only, when given)."""
        with self._lock:
            found = list(self._merges)
        return [m for m in reversed(found) if table is None or m.table == table]

    def dead_letters(self, table: str | None = None) -> list[DeadLetterRow]:
        """The newest dead letters first (a table's only, when given)."""
        with self._lock:
            found = list(self._dead)
        return [d for d in reversed(found) if table is None or d.table == table]

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self._read()
            except (KafkaException, CompactorError) as exc:
                self.problem = f"cannot read the results and dead-letter topics: {exc}"
                log.warning("console: %s; trying again in 10 s", self.problem)
                self._stop.wait(10)

    def _read(self) -> None:
        consumer = Consumer(
            self.kafka.librdkafka(
                **{"group.id": f"compactor-console-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
            )
        )
        try:
            consumer.assign(self._starts(consumer))
            self.problem = None
            while not self._stop.is_set():
                message = consumer.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                self._take(message)
        finally:
            consumer.close()

    def _starts(self, consumer: Consumer) -> list[TopicPartition]:
        """Each partition of both topics, `keep` records before its end."""
        starts = []
        for topic in (self.kafka.results_topic, self.kafka.dead_letter_topic):
            for partition in range(partition_count(self.kafka, topic)):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                starts.append(TopicPartition(topic, partition, max(low, high - self.keep)))
        return starts

    def _take(self, message: Any) -> None:
        where = f"{message.partition()}/{message.offset()}"
        if message.topic() == self.kafka.dead_letter_topic:
            headers = {k: (v or b"").decode(errors="replace") for k, v in (message.headers() or [])}
            row = DeadLetterRow(
                where,
                (message.key() or b"").decode(errors="replace"),
                headers.get(DEAD_LETTER_REASON_HEADER, "unknown"),
                headers.get(DEAD_LETTER_DETAIL_HEADER, ""),
                headers.get(DEAD_LETTER_SOURCE_HEADER, ""),
                bytes(message.value() or b""),
            )
            with self._lock:
                self._dead.append(row)
            return
        with contextlib.suppress(Exception):  # not a result we can read: skipped
            merge = merge_row(self.codec.decode_merge_result(message.value() or b""))
            with self._lock:
                self._merges.append(merge)


def merge_row(result: dict[str, Any]) -> MergeRow:
    """A decoded MergeResult as a row of the table page."""
    outputs = result.get("outputs") or ([result["output"]] if result.get("output") else [])
    produced = result.get("produced_at")
    return MergeRow(
        table=str(result["table"]),
        plan_id=str(result["plan_id"]),
        rule=str(result.get("rule") or ""),
        status=str(getattr(result["status"], "value", result["status"])),
        inputs=tuple(str(i) for i in result.get("inputs") or ()),
        outputs=tuple(str(o["segment_id"]) for o in outputs),
        bytes_in=result.get("bytes_in"),
        bytes_out=result.get("bytes_out"),
        duration_ms=result.get("duration_ms"),
        layout=result.get("layout"),
        deleted_rows=result.get("invalid_rows_removed"),
        at=produced if isinstance(produced, datetime) else None,
        error=result.get("error"),
    )

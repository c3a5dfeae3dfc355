"""Is the job ready? Its catalog loaded, its query running, its broker reachable; and its lag.

The consumer lag comes from the query's own progress: for each partition, the
latest offset Spark saw on the topic minus the offset the query has processed.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from compactor.errors import ServiceUnreachable
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import require_broker
from compactor.stream.control import Control


class Readiness:
    """What `/ready` checks; the job moves it along as it starts."""

    def __init__(self, kafka: KafkaSettings, broker_ttl: float = 10.0) -> None:
        self.catalog: str | None = "loading the catalog from the warehouse"
        self.query: str | None = "the streaming query has not started"
        self._kafka = kafka
        self._ttl = broker_ttl
        self._broker: tuple[float, str | None] = (0.0, None)
        self._lock = threading.Lock()

    def checks(self) -> dict[str, Any]:
        return {"catalog": lambda: self.catalog, "query": lambda: self.query, "broker": self.broker}

    def broker(self) -> str | None:
        """The broker answered a metadata request in the last `broker_ttl` seconds (2 s timeout)."""
        with self._lock:
            checked, problem = self._broker
            if time.monotonic() - checked < self._ttl:
                return problem
            try:
                require_broker(self._kafka, timeout=2)
                problem = None
            except ServiceUnreachable as exc:
                problem = str(exc)
            self._broker = (time.monotonic(), problem)
            return problem


class ProgressListener(StreamingQueryListener):
    """Spark's query events: readiness follows the queries, each shard's lag gauge follows its
    query's progress (`controls`: query name -> its shard's control state)."""

    def __init__(self, readiness: Readiness, controls: dict[str, Control]) -> None:
        self.readiness = readiness
        self.controls = controls
        self._running: dict[str, str] = {}  # query id -> name

    def onQueryStarted(self, event: Any) -> None:
        self._running[str(event.id)] = str(event.name)
        self.readiness.query = None

    def onQueryProgress(self, event: Any) -> None:
        control = self.controls.get(str(event.progress.name))
        if control is not None:
            control.on_lag(sum(offsets_behind(s.endOffset, s.latestOffset) for s in event.progress.sources))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        name = self._running.pop(str(event.id), "the streaming query")
        if event.exception:
            self.readiness.query = f"{name} stopped ({event.exception})"
        elif not self._running:  # a shard handed on stops cleanly; ready while another runs
            self.readiness.query = "no streaming query runs (no shard held)"


def offsets_behind(end: str | None, latest: str | None) -> int:
    """Events between what the query processed (`end`) and the topic's latest offsets, summed."""
    if not end or not latest:
        return 0
    processed, newest = json.loads(end), json.loads(latest)
    return sum(
        max(0, int(offset) - int(processed.get(topic, {}).get(partition, 0)))
        for topic, partitions in newest.items()
        for partition, offset in partitions.items()
    )

"""Is the job ready? Its catalog loaded, its query running, its broker reachable; and its lag.

The consumer lag comes from the query's own progress: for each partition, the
latest offset Spark saw on the topic minus the offset the query has processed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from typing import Any, ClassVar

from pyspark import SparkContext
from pyspark.sql.streaming.listener import (
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
    StreamingQueryProgress,
)

from compactor.errors import ConfigError, ServiceUnreachable
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
            except (ServiceUnreachable, ConfigError) as exc:  # unreachable, or refusing our credentials
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
        self._json_listener: Any = None  # made when `addListener` first asks for it

    @property
    def _jlistener(self) -> Any:
        """The JVM listener `addListener` registers: pyspark's, with events read as `_JsonEvents`
        reads them."""
        if self._json_listener is None:
            jvm: Any = SparkContext._jvm
            self._json_listener = jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
        return self._json_listener

    def onQueryStarted(self, event: Any) -> None:
        self._running[str(event.id)] = str(event.name)
        self.readiness.query = None

    def onQueryProgress(self, event: Any) -> None:
        control = self.controls.get(str(event.progress.name))
        if control is not None:
            control.on_lag(lag_of(event.progress.sources))  # None: unknown, never a stale figure

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        name = self._running.pop(str(event.id), "the streaming query")
        if event.exception:
            self.readiness.query = f"{name} stopped ({event.exception})"
        elif not self._running:  # a shard handed on stops cleanly; ready while another runs
            self.readiness.query = "no streaming query runs (no shard held)"


def offsets_behind(end: str | None, latest: str | None) -> int | None:
    """Events between what a source processed (`end`) and the topic's latest offsets, summed over
    the partitions; None when it cannot be told.

    Spark's `SourceProgress` gives both as JSON strings, for the Kafka source
    `{"topic": {"partition": offset}}`, and either can be missing, empty or `null` (no batch
    since the start, no latest offset fetched yet) or shaped otherwise (another source). A
    partition in `latest` that `end` lacks (one added to the topic) is read from its start.
    """
    processed, newest = _kafka_offsets(end), _kafka_offsets(latest)
    if processed is None or newest is None:
        return None
    return sum(
        max(0, offset - processed.get(topic, {}).get(partition, 0))
        for topic, partitions in newest.items()
        for partition, offset in partitions.items()
    )


class _JsonEvents:
    """The py4j side of a Python query listener, as pyspark's own but for a progress event, read
    from its JSON in one call. pyspark walks the event's maps through py4j, and each walk ends in
    an exception it converts with a dozen class lookups: at a few batches a second that took a
    quarter of a core and the GIL from the merges."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        self.listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        progress = StreamingQueryProgress.fromJson(json.loads(jevent.progress().json()))
        self.listener.onQueryProgress(QueryProgressEvent(progress=progress))

    def onQueryIdle(self, jevent: Any) -> None:
        pass  # nothing to follow while the query waits for data

    def onQueryTerminated(self, jevent: Any) -> None:
        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def lag_of(sources: Iterable[Any]) -> int | None:
    """A query's lag over all its sources (None when any source's is unknown, or none has one)."""
    lags = [offsets_behind(s.endOffset, s.latestOffset) for s in sources]
    if not lags or any(lag is None for lag in lags):
        return None
    return sum(lag for lag in lags if lag is not None)


def _kafka_offsets(text: str | None) -> dict[str, dict[str, int]] | None:
    if not text or not text.strip():
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not doc:
        return None
    found: dict[str, dict[str, int]] = {}
    for topic, partitions in doc.items():
        if not isinstance(partitions, dict):
            return None
        try:
            found[topic] = {str(p): int(o) for p, o in partitions.items()}
        except (TypeError, ValueError):
            return None
    return found

"""One `/metrics` for a job that runs several shards: each shard's metrics with a `shard` label.

Every shard the job runs has its own `JobMetrics` (its own registry, so that its tables,
debt and lag are its own and leave with it when the shard moves to another job). The job's
endpoint serves them all as one set of families, each sample labelled with its shard.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from compactor.observe.metrics import JobMetrics


class ShardMetrics(Collector):
    """The metrics of the shards running now, merged family by family."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self._shards: dict[int, JobMetrics] = {}
        self._lock = threading.Lock()

    def add(self, shard: int) -> JobMetrics:
        metrics = JobMetrics()
        with self._lock:
            self._shards[shard] = metrics
        return metrics

    def remove(self, shard: int) -> None:
        with self._lock:
            self._shards.pop(shard, None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            shards = sorted(self._shards.items())
        families: dict[str, Metric] = {}
        for shard, metrics in shards:
            for family in metrics.registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                merged.samples += [
                    sample._replace(labels={**sample.labels, "shard": str(shard)})
                    for sample in family.samples
                ]
        yield from families.values()

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

from compactor.kafka.lease import ControllerLease
from compactor.observe.metrics.declared import counter_family, gauge_family
from compactor.observe.metrics.driver_memory import driver_memory_families
from compactor.observe.metrics.job_metrics import JobMetrics


class ShardMetrics(Collector):
    """The metrics of the shards running now, merged family by family."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self._shards: dict[int, JobMetrics] = {}
        self._lock = threading.Lock()
        self._lease: ControllerLease | None = None

    def watch_lease(self, lease: ControllerLease) -> None:
        """Report the job's lease (not per shard): shards held, sessions lost, rejoins."""
        self._lease = lease

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
        if self._lease is not None:
            yield from lease_families(self._lease)
        yield from driver_memory_families()


def lease_families(lease: ControllerLease) -> Iterator[Metric]:
    """The lease as metrics, read when scraped."""
    notes = list(lease.notes)
    held = gauge_family("compactor_lease_shards_held")
    held.add_metric([], len(lease.owned))
    yield held
    outage = gauge_family("compactor_lease_lost")
    outage.add_metric([], 1.0 if lease.lost.is_set() else 0.0)
    yield outage
    for kind in ("lost", "rejoined", "rebuilt"):
        counter = counter_family(f"compactor_lease_{kind}")
        counter.add_metric([], lease.counts.get(kind, 0))
        yield counter
    last = next((n.outage_s for n in reversed(notes) if n.kind == "rejoined"), None)
    seconds = gauge_family("compactor_lease_last_outage_seconds")
    seconds.add_metric([], last if last is not None else 0.0)
    yield seconds

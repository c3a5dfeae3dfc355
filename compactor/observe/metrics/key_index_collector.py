"""`compactor_key_index_*`: each upsert table's key index as the job holds it (keys, memory) and
its latest snapshot on the warehouse (version, age), read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from compactor.observe.metrics.declared import gauge_family
from compactor.stream.key_indexes import IndexFacts


class KeyIndexCollector(Collector):
    def __init__(self, facts: Callable[[], Mapping[str, IndexFacts]]) -> None:
        self.facts = facts

    def collect(self) -> Iterator[Metric]:
        found = sorted(self.facts().items())
        keys = gauge_family("compactor_key_index_keys")
        memory = gauge_family("compactor_key_index_bytes")
        version = gauge_family("compactor_key_index_snapshot_version")
        age = gauge_family("compactor_key_index_snapshot_age_seconds")
        for table, facts in found:
            keys.add_metric([table], facts.keys)
            memory.add_metric([table], facts.memory_bytes)
            if facts.snapshot_version is not None and facts.snapshot_age_s is not None:
                version.add_metric([table], facts.snapshot_version)
                age.add_metric([table], facts.snapshot_age_s)
        yield keys
        yield memory
        yield version
        yield age

"""`compactor_key_index_*`: each upsert table's key index as the job holds it (keys, memory) and
its latest snapshot on the warehouse (version, age), read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from compactor.stream.key_indexes import IndexFacts


class KeyIndexCollector(Collector):
    def __init__(self, facts: Callable[[], Mapping[str, IndexFacts]]) -> None:
        self.facts = facts

    def collect(self) -> Iterator[Metric]:
        found = sorted(self.facts().items())
        keys = GaugeMetricFamily(
            "compactor_key_index_keys", "Keys in the upsert table's key index.", labels=["table"]
        )
        memory = GaugeMetricFamily(
            "compactor_key_index_bytes",
            "Driver memory the key index's columns take (0 for one kept as a dict: a comparison "
            "column of strings or decimals).",
            labels=["table"],
        )
        version = GaugeMetricFamily(
            "compactor_key_index_snapshot_version",
            "The table version of the index's latest snapshot on the warehouse (absent: none yet).",
            labels=["table"],
        )
        age = GaugeMetricFamily(
            "compactor_key_index_snapshot_age_seconds",
            "Seconds since the job wrote (or took back) the index's latest snapshot.",
            labels=["table"],
        )
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

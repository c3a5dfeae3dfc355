"""Shards: the segments topic's partitions grouped so that several jobs can share a warehouse.

Shard i of n holds the partitions p with p mod n = i. A table's events are keyed by its
name, so all of them land in one partition (`partitioning.partition_of`) and the table
belongs to exactly one shard: its catalog, due times and ledgers live with that shard's
query, in whichever job holds the shard's lease.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from compactor.kafka.partitioning import shard_of, shard_partitions

EARLIEST = -2  # Spark's `startingOffsets` code for a partition's earliest offset


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """`shards` shards over the `partitions` partitions of `topic`."""

    topic: str
    shards: int
    partitions: int

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards: {self.shards} is not a shard count (1 or more)")
        if self.shards > self.partitions:
            raise ValueError(
                f"shards: {self.shards} is more than the {self.partitions} partition(s) of topic "
                f"{self.topic}; a shard needs a partition (add partitions, or use fewer shards)"
            )

    def partitions_of(self, shard: int) -> list[int]:
        return shard_partitions(shard, self.shards, self.partitions)

    def shard_of(self, table: str) -> int:
        return shard_of(table, self.shards, self.partitions)

    def owns(self, shard: int) -> Callable[[str], bool]:
        """Whether a table belongs to `shard` (every table does when there is one shard)."""
        if self.shards == 1:
            return lambda _: True
        return lambda table: self.shard_of(table) == shard

    def name(self, shard: int) -> str:
        return f"shard-{shard}-of-{self.shards}"

    def assign(self, shard: int) -> str:
        """Spark's Kafka source `assign` option: the shard's partitions of the topic."""
        return json.dumps({self.topic: self.partitions_of(shard)})

    def starting_offsets(self, shard: int, offsets: Mapping[int, int]) -> str:
        """Spark's `startingOffsets` for a shard's first run: where a reshard left each of its
        partitions, else the earliest offset."""
        mine = {str(p): offsets.get(p, EARLIEST) for p in self.partitions_of(shard)}
        return json.dumps({self.topic: mine})

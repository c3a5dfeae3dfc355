"""Which partition a table's events go to: Kafka's default partitioner, the same in every client.

Events are keyed by the table's name, so that one table's events stay in order in one
partition. That holds across producers only if they all hash keys the same way: the
Java client (and so Spark's Kafka sink) uses murmur2, librdkafka's default is CRC32.
The compactor's producers therefore ask librdkafka for `murmur2_random`, Java's
partitioner, and `partition_of` computes the same placement without a client, so a
table's partition (and the job that owns it) can be known from its name.
"""

from __future__ import annotations

# librdkafka's name for the Java client's default partitioner (murmur2 of the key)
JAVA_PARTITIONER = "murmur2_random"

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of `data` (`org.apache.kafka.common.utils.Utils.murmur2`), as an
    unsigned int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_of(key: str, partitions: int) -> int:
    """The partition Java's default partitioner (and librdkafka's `murmur2_random`) gives `key`."""
    if partitions < 1:
        raise ValueError(f"partitions: {partitions} is not a partition count")
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def shard_partitions(shard: int, shards: int, partitions: int) -> list[int]:
    """The segments topic's partitions that make up `shard` of `shards`: p with p mod shards = shard."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard: {shard} is not one of {shards} shards")
    return list(range(shard, partitions, shards))


def shard_of(table: str, shards: int, partitions: int) -> int:
    """The shard that owns `table`: the one holding the partition its events are keyed to."""
    return partition_of(table, partitions) % shards

"""Shard layouts: every partition, so every table, in exactly one shard; Spark's source options."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.kafka.partitioning import partition_of
from compactor.kafka.shards import EARLIEST, ShardLayout

TABLES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=20)


@given(st.integers(1, 16), st.integers(0, 48), st.lists(TABLES, max_size=30))
def test_every_partition_and_table_belongs_to_one_shard(shards: int, extra: int, tables: list[str]) -> None:
    layout = ShardLayout("segments", shards, shards + extra)
    held = [p for shard in range(shards) for p in layout.partitions_of(shard)]
    assert sorted(held) == list(range(layout.partitions)), "each partition in exactly one shard"
    for table in tables:
        owners = [shard for shard in range(shards) if layout.owns(shard)(table)]
        assert owners == [layout.shard_of(table)]
        assert partition_of(table, layout.partitions) in layout.partitions_of(owners[0])


def test_shard_i_holds_the_partitions_p_with_p_mod_n_equal_i() -> None:
    layout = ShardLayout("segments", 4, 10)
    assert [layout.partitions_of(i) for i in range(4)] == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert layout.name(2) == "shard-2-of-4"


def test_spark_source_options_name_the_shards_partitions_and_where_to_start() -> None:
    layout = ShardLayout("segments", 2, 4)
    assert json.loads(layout.assign(1)) == {"segments": [1, 3]}
    assert json.loads(layout.starting_offsets(1, {1: 17, 2: 5})) == {"segments": {"1": 17, "3": EARLIEST}}


def test_one_shard_owns_every_table_without_hashing() -> None:
    assert ShardLayout("segments", 1, 3).owns(0)("anything")


@pytest.mark.parametrize(
    ("shards", "partitions", "message"),
    [
        (0, 4, "shards: 0 is not a shard count"),
        (5, 4, "shards: 5 is more than the 4 partition\\(s\\) of topic segments"),
    ],
)
def test_a_layout_that_cannot_be_refuses_by_field(shards: int, partitions: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShardLayout("segments", shards, partitions)

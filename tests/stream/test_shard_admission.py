"""A shard's job refuses an event of another shard's table (keyed otherwise than by the table
name), so that no table is merged by two shards."""

from __future__ import annotations

import pytest

from compactor.errors import DeadLetterReason, Rejected
from compactor.stream.admission import KnownTables
from tests.helpers.memory_store import InMemoryTableStore


def test_an_event_of_another_shards_table_is_refused_by_name() -> None:
    tables = KnownTables(InMemoryTableStore(), ["mine"], owns=lambda table: table == "mine")
    tables.require("mine")
    with pytest.raises(Rejected) as refused:
        tables.require("theirs")
    assert refused.value.reason is DeadLetterReason.WRONG_PARTITION
    assert "table 'theirs' belongs to another shard: its events must be keyed by the table name" in str(
        refused.value.detail
    )
    assert tables.new == [], "never taken in as a table of this shard"

"""`ArrowLoader` keeps each table open between loads and reads only the commits since (real
delta-rs on local files; the announce is kept in memory, Kafka's side is tested end to end)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from compactor.client import arrow_loader
from compactor.client.arrow_loader import ArrowLoader
from compactor.delta.paths import SEGMENT_COLUMN
from compactor.domain.events import SegmentCompleted

deltalake = pytest.importorskip("deltalake")

JAN = datetime(2024, 1, 1, tzinfo=UTC)


class KeptLoader(ArrowLoader):
    """Announces into a list."""

    def __init__(self, warehouse: Path) -> None:
        super().__init__(warehouse, "127.0.0.1:9")  # never produced to
        self.announced: list[SegmentCompleted] = []

    def announce(self, event: SegmentCompleted) -> None:
        self.announced.append(event)


def rows(n: int) -> pa.Table:
    return pa.table({"k": pa.array(range(n * 10, n * 10 + 10), pa.int64())})


def load(loader: ArrowLoader, n: int) -> Any:
    start = JAN + timedelta(hours=n)
    return loader.load("t", rows(n), start, start + timedelta(hours=1), segment_id=f"l{n}")


def bytes_of(path: Path, segment_id: str) -> int:
    """The segment's bytes as a fresh open of the table reads them."""
    return arrow_loader._segment_bytes(deltalake.DeltaTable(str(path)), segment_id)


def test_a_table_is_opened_once_and_follows_other_writers_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real_open = arrow_loader._open

    def counting_open(uri: str, options: Any) -> Any:
        opened.append(uri)
        return real_open(uri, options)

    monkeypatch.setattr(arrow_loader, "_open", counting_open)
    path = tmp_path / "t"
    with KeptLoader(tmp_path) as loader:
        segments = [load(loader, n) for n in range(3)]
        other = deltalake.DeltaTable(str(path))  # another writer: an append and a delete
        deltalake.write_deltalake(
            other, rows(100).append_column(SEGMENT_COLUMN, pa.array(["x"] * 10)), mode="append"
        )
        other.delete("k = 0")
        segments += [load(loader, n) for n in range(3, 5)]
        version = deltalake.DeltaTable(str(path)).version()
        again = load(loader, 1)  # a retry after the other writer's commits: the first load's record
        assert deltalake.DeltaTable(str(path)).version() == version, "a retry writes nothing"

    assert opened == [str(path)] * 2, "opened at the first load (not there yet) and after its commit"
    assert [s.id for s in segments] == [f"l{n}" for n in range(5)]
    assert [e.segment.id for e in loader.announced] == [f"l{n}" for n in range(5)] + ["l1"]
    assert (again.records, again.bytes) == (10, segments[1].bytes)
    assert all(s.bytes == bytes_of(path, s.id) > 0 for s in segments[1:])
    table = deltalake.DeltaTable(str(path)).to_pyarrow_table()
    assert sorted(table.column("k").to_pylist()) == list(range(1, 50)) + list(range(1000, 1010))
    assert version == 6, "3 loads, the other writer's append and delete, 2 loads"


def test_a_failed_load_leaves_no_stale_table_behind(tmp_path: Path) -> None:
    with KeptLoader(tmp_path) as loader:
        load(loader, 0)
        with pytest.raises(Exception, match="k"):
            loader.load("t", pa.table({"k": pa.array(["not a number"])}), JAN, JAN + timedelta(hours=1))
        other = deltalake.DeltaTable(str(tmp_path / "t"))
        deltalake.write_deltalake(
            other, rows(7).append_column(SEGMENT_COLUMN, pa.array(["x"] * 10)), mode="append"
        )
        assert load(loader, 1).bytes == bytes_of(tmp_path / "t", "l1")
    assert deltalake.DeltaTable(str(tmp_path / "t")).version() == 2

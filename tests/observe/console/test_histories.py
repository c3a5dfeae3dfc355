"""A table page's refresh reads only the commits since its last read: the whole history once,
again only when log cleanup removed what came after the last read."""

from __future__ import annotations

from dataclasses import dataclass

from compactor.catalog.changes import CommitRecord
from compactor.observe.console.histories import Histories
from tests.helpers.memory_store import InMemoryTableStore
from tests.helpers.segments import seg


@dataclass
class CountingStore(InMemoryTableStore):
    whole_reads: int = 0

    def history(self, table: str) -> list[CommitRecord]:
        self.whole_reads += 1
        return super().history(table)


def versions(records: list[CommitRecord]) -> list[int]:
    return [r.version for r in records]


def test_a_refresh_reads_only_the_commits_since_the_last_read() -> None:
    store = CountingStore()
    store.create("t")
    for n in range(3):
        store.load(seg(f"s{n}", f"2024-01-0{n + 1}"))
    histories = Histories()
    first = histories.of(store, "t")
    assert store.whole_reads == 1 and versions(first) == versions(store.history("t"))
    store.whole_reads = 0
    assert histories.of(store, "t") == first and store.whole_reads == 0, "nothing new: nothing read"
    store.load(seg("s3", "2024-01-04"))
    after = histories.of(store, "t")
    assert store.whole_reads == 0
    assert versions(after) == versions(store.history("t")) and len(after) == len(first) + 1


def test_the_history_is_read_whole_again_when_cleanup_removed_what_followed_the_last_read() -> None:
    store = CountingStore()
    store.create("t")
    store.load(seg("s0", "2024-01-01"))
    histories = Histories()
    histories.of(store, "t")
    store.load(seg("s1", "2024-01-02"))
    store.cleaned["t"] = {store.latest_version("t")}
    store.whole_reads = 0
    assert versions(histories.of(store, "t")) == versions(store.history("t"))
    assert store.whole_reads == 2, "once by the histories, once by this test's own check"


def test_another_store_for_the_table_reads_it_whole_and_only_so_many_tables_are_kept() -> None:
    stores = [CountingStore(), CountingStore()]
    for store in stores:
        store.create("t")
        store.load(seg("s0", "2024-01-01"))
    histories = Histories(kept=2)
    histories.of(stores[0], "t")
    histories.of(stores[1], "t")  # the shard moved: its new store's reads are not the old one's
    assert [s.whole_reads for s in stores] == [1, 1]
    for table in ("a", "b"):
        stores[0].create(table)
        histories.of(stores[0], table)
    histories.of(stores[1], "t")
    assert stores[1].whole_reads == 2, "t was dropped to keep two tables"

"""The log readers' commits in memory: within one budget of log text over all of a store's tables,
however many tables and however long their histories (a driver beside thousands of tables keeps
one reader per table); the fast paths' window stays cached while it fits."""

from __future__ import annotations

import json

from compactor.delta.log.reader import RECENT_COMMITS, CommitCache, DeltaLogReader


class CountedFiles:
    """A log held in a dict, counting the commit files read."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.reads = 0

    def exists(self, uri: str) -> bool:
        return uri in self.texts

    def read_text(self, uri: str) -> str | None:
        if uri.endswith(".json"):
            self.reads += 1
        return self.texts.get(uri)

    def list_names(self, uri: str) -> list[str]:
        return [u.removeprefix(uri + "/") for u in self.texts if u.startswith(uri + "/")]

    def commit(self, table: str, version: int, padding: int = 0) -> int:
        """Write one commit of `table`; its size in bytes."""
        info = {"commitInfo": {"operation": "WRITE", "userMetadata": f"load {version:06d}" + " " * padding}}
        text = json.dumps(info) + "\n"
        self.texts[f"mem://{table}/_delta_log/{version:020d}.json"] = text
        return len(text)


def test_a_long_history_keeps_the_newest_commits_within_the_budget_and_the_window_cached() -> None:
    files = CountedFiles()
    size = max(files.commit("t", version) for version in range(600))
    cache = CommitCache(budget=(RECENT_COMMITS + 10) * size)
    reader = DeltaLogReader(files, "mem://t", "t", cache)  # type: ignore[arg-type]
    for version in range(600):  # a fold catching up reads every commit once
        assert reader.commit(version) is not None
    assert cache.held <= cache.budget
    assert RECENT_COMMITS + 10 >= len(cache) >= RECENT_COMMITS, "the window and a few more"

    read = files.reads
    window = [version for version, _ in reader.recent(RECENT_COMMITS)]
    assert window == list(range(599, 599 - RECENT_COMMITS, -1))
    assert files.reads == read, "the fast paths' window is served from memory"

    for version in range(600, 610):  # commits land between two looks
        files.commit("t", version)
    read = files.reads
    assert len(list(reader.recent(RECENT_COMMITS))) == RECENT_COMMITS
    assert files.reads == read + 10, "only the new commits are read"
    assert cache.held <= cache.budget


def test_many_tables_share_one_budget_and_each_keeps_its_newest_commits() -> None:
    files, tables = CountedFiles(), [f"t{i}" for i in range(200)]
    size = max(files.commit(table, version) for table in tables for version in range(30))
    cache = CommitCache(budget=1_000 * size)
    readers = [DeltaLogReader(files, f"mem://{t}", t, cache) for t in tables]  # type: ignore[arg-type]
    for reader in readers:
        assert [v for v, _ in reader.recent(30)] == list(range(29, -1, -1))
    assert len(cache) <= 1_000 < 200 * 30, "the tables' histories together pass the budget"
    assert cache.held <= cache.budget

    for reader in readers:  # the question asked of each table in every batch: its newest commits
        assert [v for v, _ in reader.recent(4)] == [29, 28, 27, 26]
    read = files.reads
    for reader in readers:
        list(reader.recent(4))
    assert files.reads == read, "the newest commits of every table now fit, and stay"


def test_a_commit_larger_than_the_budget_is_read_but_not_kept() -> None:
    files = CountedFiles()
    small = files.commit("t", 0)
    files.commit("t", 1, padding=4 * small)
    cache = CommitCache(budget=3 * small)
    reader = DeltaLogReader(files, "mem://t", "t", cache)  # type: ignore[arg-type]
    assert reader.commit(0) is not None and reader.commit(1) is not None
    assert reader.commit(1) is not None
    assert files.reads == 3, "the large one is read each time"
    assert len(cache) == 1 and cache.held == small

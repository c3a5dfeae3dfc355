"""The log reader's commits in memory: the fast paths' window stays cached, older commits do not,
however long the table's history grows (a driver beside thousands of tables keeps one per table)."""

from __future__ import annotations

import json

from compactor.delta.log.reader import CACHED_COMMITS, RECENT_COMMITS, DeltaLogReader

LOG = "mem://t/_delta_log"


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

    def commit(self, version: int) -> None:
        info = {"commitInfo": {"operation": "WRITE", "userMetadata": f"load {version}"}}
        self.texts[f"{LOG}/{version:020d}.json"] = json.dumps(info) + "\n"


def test_a_long_history_keeps_only_the_newest_commits_and_the_window_stays_cached() -> None:
    files = CountedFiles()
    for version in range(600):
        files.commit(version)
    reader = DeltaLogReader(files, "mem://t", "t")  # type: ignore[arg-type]
    for version in range(600):  # a fold catching up reads every commit once
        assert reader.commit(version) is not None
    assert len(reader._commits) == CACHED_COMMITS <= RECENT_COMMITS + 16, "the window and a few more"

    read = files.reads
    window = [version for version, _ in reader.recent(RECENT_COMMITS)]
    assert window == list(range(599, 599 - RECENT_COMMITS, -1))
    assert files.reads == read, "the fast paths' window is served from memory"

    for version in range(600, 610):  # commits land between two looks
        files.commit(version)
    read = files.reads
    assert len(list(reader.recent(RECENT_COMMITS))) == RECENT_COMMITS
    assert files.reads == read + 10, "only the new commits are read"
    assert len(reader._commits) == CACHED_COMMITS

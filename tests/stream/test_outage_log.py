"""An outage, said where an operator looks: `compactor status` (the shard's outage file), the
console's notes, and the job's handler (file-system stand-in, no JVM)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from compactor.stream.outage_log import OutageLog, outage_lines
from compactor.stream.outages import Outages
from tests.helpers.harness import Clock
from tests.helpers.memory_store import InMemoryFiles
from tests.stream.test_outages import refused

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "compactor.stream.outage_log"]


def test_an_outage_is_written_once_and_read_back_until_it_is_over() -> None:
    files: Any = InMemoryFiles()
    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    record = OutageLog(files, "/wh", "shard-0")
    record.sync(outages.current)
    assert files.texts == {} and outage_lines(files, "/wh") == [], "nothing to say"
    for table in "abc":
        outages.failed(table, refused())
    record.sync(outages.current)
    (line,) = outage_lines(files, "/wh")[1:]
    assert line.startswith("  shard-0: outage since 2024-03-01 00:00:00 UTC: 3 table(s) failed with OSError/")
    assert "attempts paused until 00:01:00" in line
    writes = dict(files.texts)
    record.sync(outages.current)
    assert files.texts == writes, "unchanged: not written again"
    outages.succeeded("a")
    record.sync(outages.current)
    (over,) = outage_lines(files, "/wh")[1:]
    assert over.startswith("  shard-0: the last outage (OSError/java.net.ConnectException) was over by ")


def test_an_outage_left_on_by_an_earlier_start_of_the_shard_is_marked_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store's outage failed the shard's query; its next start knows of no outage and says
    the one its file shows is over (status showed it as going on for good)."""
    files: Any = InMemoryFiles()
    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    for table in "abc":
        outages.failed(table, refused())
    OutageLog(files, "/wh", "shard-0").sync(outages.current)  # the start that saw it, then stopped
    assert outage_lines(files, "/wh")[1].startswith("  shard-0: outage since ")
    again = OutageLog(files, "/wh", "shard-0")
    with caplog.at_level(logging.WARNING, "compactor.stream.outage_log"):
        again.sync(None)
    assert said(caplog) == [
        "outage of OSError/java.net.ConnectException since 2024-03-01T00:00:00+00:00 over: "
        "the shard started again after it"
    ], "said in the job's log as an outage a success ends is"
    (over,) = outage_lines(files, "/wh")[1:]
    assert over.startswith("  shard-0: the last outage (OSError/java.net.ConnectException) was over by ")
    writes = dict(files.texts)
    again.sync(None)
    assert files.texts == writes, "said once"
    fresh: Any = InMemoryFiles()
    OutageLog(fresh, "/wh", "shard-1").sync(None)
    assert fresh.texts == {}, "nothing to say when no outage was left on"


def test_a_failed_write_is_tried_again_at_the_next_upkeep(caplog: pytest.LogCaptureFixture) -> None:
    class Down:
        def __init__(self) -> None:
            self.texts: dict[str, str] = {}
            self.fail = True

        def read_text(self, uri: str) -> str | None:
            return self.texts.get(uri)

        def write_text(self, uri: str, text: str) -> None:
            if self.fail:
                raise OSError("the object store is unreachable")
            self.texts[uri] = text

    files = Down()
    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    for table in "abc":
        outages.failed(table, refused())
    record = OutageLog(files, "/wh", "shard-0")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "compactor.stream.outage_log"):
        record.sync(outages.current)
    assert files.texts == {}
    assert said(caplog) == [
        "outage log: updating /wh/_compactor/outages/shard-0.json failed (OSError); trying again"
    ]
    files.fail = False
    record.sync(outages.current)
    assert len(files.texts) == 1

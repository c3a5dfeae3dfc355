"""An outage, said where an operator looks: `compactor status` (the shard's outage file), the
console's notes, and the job's handler (file-system stand-in, no JVM)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from compactor.stream.outage_log import OutageLog, outage_lines
from compactor.stream.outages import Outages
from tests.helpers.harness import Clock
from tests.helpers.memory_store import InMemoryFiles
from tests.stream.test_outages import refused

T0 = datetime(2024, 3, 1, tzinfo=UTC)


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


def test_a_failed_write_is_tried_again_at_the_next_upkeep() -> None:
    class Down:
        def __init__(self) -> None:
            self.texts: dict[str, str] = {}
            self.fail = True

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
    record.sync(outages.current)
    assert files.texts == {}
    files.fail = False
    record.sync(outages.current)
    assert len(files.texts) == 1

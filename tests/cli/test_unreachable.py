"""A command whose broker does not answer fails in seconds with one line and exit 3."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

COMPACTOR = str(Path(sys.executable).parent / "compactor")


@pytest.mark.integration
@pytest.mark.parametrize(
    "args",
    [
        ["request", "--table", "t", "--rule", "minor"],
        ["table", "disable", "t"],
        ["table", "cancel", "t", "0123456789abcdef01234567"],
    ],
)
def test_an_unreachable_broker_exits_3_within_seconds_in_one_line(args: list[str]) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [COMPACTOR, *args, "--bootstrap-servers", "127.0.0.1:1"], capture_output=True, text=True, timeout=120
    )
    took = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines() == [
        "error: Kafka at 127.0.0.1:1 did not answer within 10s (Failed to get metadata: Local: Broker transport failure)"
    ]
    assert took < 45, f"took {took:.0f}s"  # 10 s of asking plus start-up, not librdkafka's minute or more


@pytest.mark.integration
def test_under_log_format_json_the_failure_is_one_json_record() -> None:
    result = subprocess.run(
        [COMPACTOR, "--log-format", "json", "table", "disable", "t", "--bootstrap-servers", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    (line,) = result.stderr.splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"]) == ("ERROR", "compactor.cli.main")
    assert record["message"].startswith("error: Kafka at 127.0.0.1:1 did not answer within 10s")
    assert record["timestamp"].endswith("+00:00")

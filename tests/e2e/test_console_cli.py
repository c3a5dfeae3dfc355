"""The console from the command line: `compactor run --console-port` serves it with the metrics
and probes on one port; `compactor console` serves a warehouse with no job of its own (without a
broker, the pages that need one say so); a bad token spec fails in seconds with one line."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from compactor.dev.broker_process import free_ports
from tests.helpers.jobs import COMPACTOR, TABLE, bulk_load, start_job, stop, wait_while_running
from tests.helpers.sales import TABLE as SALES
from tests.helpers.sales import load_days
from tests.helpers.streaming import make_kafka

pytestmark = pytest.mark.integration

CONFIG_YAML = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week]\n"
TOKEN_ENV = "COMPACTOR_TEST_CONSOLE_TOKEN"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_the_job_serves_its_console_beside_its_metrics_on_one_port(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    bulk_load(spark, warehouse, kafka, days=7, rows=10)
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    (port,) = free_ports(1, set())
    token = os.environ[TOKEN_ENV] = "console-token-7f3a9c2e1b5d"
    job = start_job(
        config, warehouse, tmp_path / "cp", kafka_bootstrap, kafka, port,
        "--console-port", str(port), "--console-token", f"env:{TOKEN_ENV}",
        "--console-allowed-host", "compactor.internal",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_while_running(lambda: "<b>1</b> segments" in get(f"{base}/")[1], job, job.log, "the week merged")
        code, page = get(f"{base}/tables/{TABLE}")
        assert code == 200 and f'id="table-name">{TABLE}<' in page and "sign in to act" in page
        merged = [
            line
            for line in get(f"{base}/metrics")[1].splitlines()
            if line.startswith("compactor_merges_completed_total{")
        ]
        assert merged == [
            f'compactor_merges_completed_total{{rule="auto_merge",shard="0",table="{TABLE}"}} 1.0'
        ], "metrics on the same port"
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/tables/nope")[0] == 404
        rebound = urllib.request.Request(f"{base}/tables/{TABLE}", headers={"Host": f"evil.example:{port}"})
        try:
            urllib.request.urlopen(rebound, timeout=10)
            raise AssertionError("a page served for another site's host name")
        except urllib.error.HTTPError as exc:
            assert exc.code == 421
        named = urllib.request.Request(f"{base}/", headers={"Host": f"compactor.internal:{port}"})
        assert urllib.request.urlopen(named, timeout=10).status == 200, "--console-allowed-host"
    finally:
        output = stop(job)
    assert f"console: http://127.0.0.1:{port}/ (controls for the token's holder" in output
    assert token not in output, "the console's token is never logged"


def test_compactor_console_serves_a_warehouse_without_a_job_or_a_broker(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    load_days(spark, warehouse, kafka, datetime(2024, 1, 1, tzinfo=UTC), days=3, rows=10)  # recorded in Delta
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    (port,) = free_ports(1, set())
    log = tmp_path / "console.log"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    with open(log, "w") as out:
        console = subprocess.Popen(
            [COMPACTOR, "console", "--config", str(config), "--warehouse", str(warehouse), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_while_running(lambda: get(f"{base}/")[0] == 200, console, log, "the console")
        code, page = get(f"{base}/")
        assert f'data-table="{SALES}"' in page and "<b>3</b> segments" in page and "read-only" in page
        assert "no Kafka broker given" in page
        code, letters = get(f"{base}/dead-letters")
        assert code == 200 and "needs the Kafka broker" in letters
        code, table = get(f"{base}/tables/{SALES}")
        assert code == 200 and table.count('class="segment') == 3 and '<form method="post"' not in table
    finally:
        console.terminate()
        console.wait(timeout=60)


@pytest.mark.parametrize("command", ["run", "console"])
def test_a_bad_token_spec_fails_in_seconds_with_one_line(command: str, tmp_path: Path) -> None:
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    env = {k: v for k, v in os.environ.items() if k != "UNSET_TOKEN_VAR"}
    token_flag = "--console-token"
    began = time.monotonic()
    done = subprocess.run(
        [
            COMPACTOR, command, "--config", str(config), "--warehouse", str(tmp_path / "w"),
            "--bootstrap-servers", "127.0.0.1:1", token_flag, "env:UNSET_TOKEN_VAR",
        ],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert time.monotonic() - began < 20
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --console-token env:UNSET_TOKEN_VAR: the environment variable UNSET_TOKEN_VAR is not set"
    ]

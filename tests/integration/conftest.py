"""Every table an integration test leaves behind must read the same in delta-rs as in Spark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.streaming import assert_delta_rs_agrees


@pytest.fixture(autouse=True)
def _delta_rs_reads_what_spark_reads(request: pytest.FixtureRequest) -> Iterator[None]:
    if "warehouse" not in request.fixturenames:
        yield
        return
    # asked for before the test runs, so that both are torn down after this check
    warehouse: Path = request.getfixturevalue("warehouse")
    spark = request.getfixturevalue("spark")
    yield
    if getattr(request.node, "rep_call_failed", True):
        return
    for table in sorted(p for p in warehouse.iterdir() if (p / "_delta_log").is_dir()):
        assert_delta_rs_agrees(spark, table)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.rep_call_failed = report.failed  # type: ignore[attr-defined]
    return report

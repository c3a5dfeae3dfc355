"""`compactor table cancel`: the request it publishes, and bad input refused at once, in one line,
before any broker is asked."""

from __future__ import annotations

import time
from typing import Any

import pytest
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.domain.events import CompactionRequested

PLAN = "0123456789abcdef01234567"


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr("compactor.cli.table.publish_request", lambda *args: sent.append(args))
    return sent


def test_cancel_publishes_a_request_naming_only_the_plan(published: list[tuple[Any, ...]]) -> None:
    result = CliRunner().invoke(
        main, ["table", "cancel", "sales", PLAN, "--bootstrap-servers", "b:9092", "--segments-topic", "segs"]
    )
    assert result.exit_code == 0, result.output
    ((event, config_path, bootstrap, topic),) = published
    assert isinstance(event, CompactionRequested)
    assert (event.table, event.cancel_plan, config_path, bootstrap, topic) == (
        "sales",
        PLAN,
        None,
        "b:9092",
        "segs",
    )
    assert (event.rule, event.segment_ids, event.delete_sub_partition, event.merging) == (
        None,
        (),
        None,
        None,
    )
    assert result.output == (
        f"cancel of plan {PLAN} on sales requested (request {event.request_id}); "
        "the running job takes it in order\n"
    )


@pytest.mark.parametrize(
    ("table", "plan_id", "error"),
    [
        ("sales", "m-" + PLAN, f"error: plan id 'm-{PLAN}' is invalid: a plan id is 24 lowercase hex digits"),
        ("sales", PLAN[:-1], f"error: plan id '{PLAN[:-1]}' is invalid"),
        ("../etc", PLAN, "error: table name '../etc' is invalid"),
    ],
)
def test_bad_input_fails_in_one_line_before_asking_the_broker(
    published: list[tuple[Any, ...]], table: str, plan_id: str, error: str
) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(
        main, ["table", "cancel", table, plan_id, "--bootstrap-servers", "127.0.0.1:1"]
    )
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(error), line
    assert published == [] and time.monotonic() - started < 5


def test_cancel_takes_the_options_of_disable_and_enable() -> None:
    group = main.commands["table"]
    assert hasattr(group, "commands")
    options = {
        name: sorted(p.name or "" for p in group.commands[name].params) for name in ("cancel", "disable")
    }
    assert options["cancel"] == sorted([*options["disable"], "plan_id"])


def test_enable_quarantined_releases_every_quarantined_table_or_those_of_one_reason(
    published: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from compactor.stream.table_failures import quarantine_note

    notes = {
        "a": quarantine_note("OSError: java.net.ConnectException: refused", "f1"),
        "b": quarantine_note("ValueError: corrupt Parquet footer", "f2"),
        "c": quarantine_note("OSError: java.net.ConnectException: timed out", "f3"),
    }
    monkeypatch.setattr("compactor.cli.table.read_quarantines", lambda warehouse, config: notes)
    args = ["table", "enable", "--quarantined", "--warehouse", "/wh", "--bootstrap-servers", "b:9092"]
    result = CliRunner().invoke(main, [*args, "--reason", "connectexception"])
    assert result.exit_code == 0, result.output
    assert [(e.table, e.merging) for e, *_ in published] == [("a", True), ("c", True)]
    assert result.output.splitlines()[-1] == "2 table(s) released"
    published.clear()
    result = CliRunner().invoke(main, args)
    assert [e.table for e, *_ in published] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["enable"], "name a TABLE, or give --quarantined"),
        (["enable", "t", "--quarantined"], "name a TABLE, or give --quarantined"),
        (["enable", "t", "--reason", "x"], "--reason selects among --quarantined tables"),
    ],
)
def test_enable_refuses_a_muddled_request_in_one_line(
    published: list[tuple[Any, ...]], args: list[str], error: str
) -> None:
    result = CliRunner().invoke(main, ["table", *args, "--bootstrap-servers", "127.0.0.1:1"])
    assert result.exit_code == 2 and error in result.output and published == []

"""What the console tells of a control it sent, from what the job shows afterwards; and the
token spec."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from compactor.codec.events import default_codec
from compactor.errors import ConfigError
from compactor.kafka.settings import KafkaSettings
from compactor.observe.console.controls import GIVE_UP, Controls, Sent
from compactor.observe.console.serve import console_token
from compactor.observe.console.snapshot import MergeRow

AT = datetime(2024, 6, 1, 12, tzinfo=UTC)


def controls(now: datetime) -> Controls:
    return Controls(KafkaSettings("127.0.0.1:1"), default_codec(), clock=lambda: now)


def merge(plan: str, at: datetime, status: str = "SUCCEEDED", error: str | None = None) -> MergeRow:
    return MergeRow("t", plan, "minor", status, ("a",), ("b",), 1, 1, 5, None, None, at, error)


def test_a_switch_is_taken_once_the_table_shows_it() -> None:
    off = Sent("r1", "t", "disable", AT)
    assert not controls(AT).outcome(off, True, []).done
    assert controls(AT).outcome(off, False, []).text == "taken: merging on t is off"
    on = Sent("r2", "t", "enable", AT)
    assert controls(AT).outcome(on, True, []).text == "taken: merging on t is on"


def test_a_request_is_done_with_the_first_result_after_it() -> None:
    sent = Sent("r1", "t", "request", AT, rule="minor")
    older = merge("p0", AT - timedelta(seconds=1))
    assert not controls(AT).outcome(sent, True, [older]).done, "a result from before the request is not its"
    newest_first = [merge("p2", AT + timedelta(seconds=9)), merge("p1", AT + timedelta(seconds=3)), older]
    assert controls(AT).outcome(sent, True, newest_first).text == "merge p1 (minor): SUCCEEDED"


def test_a_cancel_is_done_with_its_plans_result_and_a_silent_request_gives_up() -> None:
    sent = Sent("r1", "t", "cancel", AT, plan_id="p7")
    result = merge("p7", AT + timedelta(seconds=2), "FAILED", "MergeCancelled: cancelled by an operator")
    assert controls(AT).outcome(sent, True, [merge("p6", AT + timedelta(seconds=1)), result]).text == (
        "merge p7: FAILED (MergeCancelled: cancelled by an operator)"
    )
    late = controls(AT + GIVE_UP + timedelta(seconds=1)).outcome(sent, True, [])
    assert late.done and late.text.startswith("no outcome seen")


def test_the_token_comes_from_the_environment_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert console_token(None) is None
    monkeypatch.setenv("CONSOLE_T", "x" * 16)
    assert console_token("env:CONSOLE_T") == "x" * 16
    monkeypatch.setenv("CONSOLE_T", "short")
    with pytest.raises(
        ConfigError, match=r"env:CONSOLE_T: the environment variable CONSOLE_T holds 5 characters"
    ):
        console_token("env:CONSOLE_T")
    monkeypatch.delenv("CONSOLE_T")
    with pytest.raises(ConfigError, match=r"CONSOLE_T is not set"):
        console_token("env:CONSOLE_T")
    with pytest.raises(ConfigError, match=r"give env:NAME"):
        console_token("the-token-itself")

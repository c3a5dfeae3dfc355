"""The commit-msg hook's check (ops/git/commit_msg.py): the form CONTRIBUTING.md asks for."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("commit_msg", ROOT / "ops/git/commit_msg.py")
assert _spec is not None and _spec.loader is not None
commit_msg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(commit_msg)

GOOD = """stream: drain a lost shard without saving its catalog

A shard lost with its session is fenced; its stop then drained the
handler, whose final catalog save raised Fenced.
"""


@pytest.mark.parametrize(
    "message",
    [
        GOOD,
        "docs: say who writes checkpoints\n",
        "key index: drop holders of segments no longer live",
        "delta, docs: keep the log small",
        "stream/merging: replace hung threads",
        "# a comment git drops\nci: run the smoke benchmark\n\n# another\n",
        'Revert "stream: drain a lost shard"\n\nThis reverts commit ac74b8a.',
        "Merge branch 'main' of somewhere",
        "fixup! stream: drain a lost shard",
    ],
)
def test_the_projects_form_passes(message: str) -> None:
    assert commit_msg.problems(message) == []


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("", "the message is empty"),
        ("# only a comment\n", "the message is empty"),
        ("stream: " + "x" * 65, "the subject is 73 characters; at most 72"),
        (
            "Stream: drain a lost shard",
            "the subject 'Stream: drain a lost shard' is not `area: what changed` (a lower-case area, a colon, a space)",
        ),
        (
            "stream:drain",
            "the subject 'stream:drain' is not `area: what changed` (a lower-case area, a colon, a space)",
        ),
        (
            "stream: fixed the drain",
            "the subject starts with 'fixed'; say what the commit does: 'add', 'fix', 'keep'",
        ),
        (
            "stream: Adds a drain",
            "the subject starts with 'Adds'; say what the commit does: 'add', 'fix', 'keep'",
        ),
        ("stream: drain a lost shard.", "the subject ends with a full stop"),
        (
            "stream: drain a lost shard\nits catalog is not saved",
            "the subject is followed by a line that is not blank; the body starts after one",
        ),
    ],
)
def test_each_departure_is_named(message: str, problem: str) -> None:
    assert commit_msg.problems(message) == [problem]


def test_the_hook_refuses_a_bad_message_and_passes_a_good_one(tmp_path: Path) -> None:
    script = ROOT / "ops/git/commit_msg.py"
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text(GOOD)
    bad.write_text("Fixed things.\n")
    ok = subprocess.run([sys.executable, script, good], capture_output=True, text=True)
    refused = subprocess.run([sys.executable, script, bad], capture_output=True, text=True)
    assert (ok.returncode, ok.stderr) == (0, "")
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0] == (
        "commit message: the subject 'Fixed things.' is not `area: what changed` (a lower-case area, a colon, a space)"
    )


def test_the_hook_file_runs_the_check() -> None:
    hook = ROOT / "ops/git/hooks/commit-msg"
    assert hook.stat().st_mode & 0o111, "the hook is executable"
    assert "ops/git/commit_msg.py" in hook.read_text()

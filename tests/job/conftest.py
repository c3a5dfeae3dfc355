"""The stream wired to an in-memory store (tests.helpers.harness), one per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.harness import Harness


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)

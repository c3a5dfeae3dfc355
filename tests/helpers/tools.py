"""Test servers built from Go modules into `.tools/` (`make tools`), and waiting on conditions."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools"


def tool_binary(name: str, env: str) -> Path:
    """`$env`, else what `make` built into `.tools/`, else one on PATH."""
    for candidate in (os.environ.get(env), TOOLS / name, shutil.which(name)):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise RuntimeError(f"no {name}: run `make .tools/{name}` (go install) or set {env}")


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll `check` until it holds; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"no {what} in {seconds:.0f}s"
        time.sleep(0.2)

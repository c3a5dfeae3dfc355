"""Tests of the benchmarks' own code: their library (bench/harness) and the readings scripts take
of their records. Scripts import the library as `harness`, with `bench/` on sys.path."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """A module of bench/ (`freshness`, `harness.targets`), imported as a script imports it."""
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    return importlib.import_module(name)

"""What every benchmark reports the same way: the machine it ran on, its results file, a plain
text table, percentiles, a stopwatch and the command line all scripts share."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

RESULTS = Path(__file__).parents[1] / "results"
MIB = 1024 * 1024


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (out.stderr or out.stdout).splitlines()
    return first[0].strip() if first else None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info() -> dict[str, Any]:
    """What ran the benchmark: CPUs, memory, OS and the versions that matter."""
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "os": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "pyspark": _version("pyspark"),
        "delta_spark": _version("delta-spark"),
        "confluent_kafka": _version("confluent-kafka"),
        "java": _java_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "spark_submit_opts": os.environ.get("SPARK_SUBMIT_OPTS"),  # a smoke run's JIT settings
    }


def save_results(name: str, quick: bool, payload: dict[str, Any]) -> Path:
    """Write bench/results/<name>[_quick].json with the machine and the time of the run."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / (f"{name}_quick.json" if quick else f"{name}.json")
    body = {"benchmark": name, "quick": quick, "when": datetime.now(UTC).isoformat(), **payload}
    body.setdefault("machine", machine_info())
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=2, default=str) + "\n")
    tmp.replace(out)
    print(f"saved {out}")
    return out


def percentiles(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, p50, p95, p99, min, max and mean (nearest-rank percentiles)."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "min": None, "max": None, "mean": None}
    ordered = sorted(values)

    def rank(p: float) -> float:
        k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
        return ordered[k]

    return {
        "n": len(ordered),
        "p50": rank(50),
        "p95": rank(95),
        "p99": rank(99),
        "min": ordered[0],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]], left: Sequence[int] = (0,)) -> None:
    """A plain aligned text table (columns in `left` left-aligned, others right); floats get 3 decimals."""

    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]
    print(
        "  ".join(
            h.ljust(w) if i in left else h.rjust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    )
    for r in text:
        print(
            "  ".join(
                v.ljust(w) if i in left else v.rjust(w)
                for i, (v, w) in enumerate(zip(r, widths, strict=True))
            )
        )


class Stopwatch:
    """`with Stopwatch() as w: ...`, then `w.seconds`."""

    seconds: float = 0.0

    def __enter__(self) -> Stopwatch:
        self._began = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.seconds = time.perf_counter() - self._began


def bench_parser(doc: str | None, quick: str) -> argparse.ArgumentParser:
    """The command line every benchmark shares: its docstring as help, and `--quick` (`quick` says what it runs)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{quick} (CI smoke run)")
    return parser

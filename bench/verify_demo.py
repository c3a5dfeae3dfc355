"""`compactor verify` on the demo's table: every merge commit re-read by time travel and checked
against the certificate it committed.

The demo runs as `compactor demo` runs it (a local broker unless KAFKA_BOOTSTRAP_SERVERS is set,
the job in this process, 31 daily segments of 200 rows under auto_merge [week, month]: four week
merges and a month's); then `compactor verify demo_sales --json` runs as an operator runs it, in
a process of its own (its own JVM: the wall time includes Spark's start). Its Spark start alone is measured the same way (`compactor verify` on a
warehouse without the table fails right after the session is up), so the checking's own share
is printed apart.

Targets: every merge holds; the command's wall time under 60 s.

Run: .venv/bin/python bench/verify_demo.py [--quick]   (quick: 7 days, one week merge)
Saves bench/results/verify_demo[_quick].json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compactor.dev.demo import TABLE, run_demo
from harness.report import bench_parser, machine_info, save_results
from harness.services import kafka_bootstrap
from harness.targets import Target, judge

TARGETS = (
    Target("not_holding", "merge commits that do not hold", 0),
    Target("verify_seconds", "`compactor verify` on the demo's table, wall time", 60.0, unit=" s"),
)
COMMAND = [sys.executable, "-c", "from compactor.cli import main; main()"]


def timed_verify(warehouse: Path, table: str, *extra: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(
        [*COMMAND, "verify", table, "--warehouse", str(warehouse), *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - started, done


def main() -> None:
    args = bench_parser(__doc__, "7 days: one week merge").parse_args()
    days = 7 if args.quick else 31
    work = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        with kafka_bootstrap(work) as bootstrap:
            print(f"the demo: {days} days of 200 rows ...", flush=True)
            started = time.perf_counter()
            status = run_demo(work / "demo", days, 200, bootstrap, lambda line: None)
            demo_seconds = time.perf_counter() - started
        if status != 0:
            raise SystemExit(f"the demo failed (exit status {status})")
        warehouse = work / "demo" / "warehouse"
        seconds, done = timed_verify(warehouse, TABLE, "--json")
        if done.returncode not in (0, 1):
            raise SystemExit(f"compactor verify failed ({done.returncode}): {done.stderr[-2000:]}")
        document: dict[str, Any] = json.loads(done.stdout)
        for merge in document["merges"]:
            print(f"  version {merge['version']} ({merge['rule']}): {merge['verdict']}: {merge['detail']}")
        (work / "empty").mkdir()
        start_only, _ = timed_verify(work / "empty", TABLE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts = document["counts"]
    merges = len(document["merges"])
    print(
        f"{merges} merge commit(s): {counts['holds']} hold, {counts['broken']} broken, "
        f"{counts['not checkable']} not checkable; `compactor verify` {seconds:.1f} s wall "
        f"(its Spark start {start_only:.1f} s, so {seconds - start_only:.1f} s checking)"
    )
    verdicts = judge(TARGETS, {"not_holding": merges - counts["holds"], "verify_seconds": seconds})
    save_results(
        "verify_demo",
        args.quick,
        {
            "days": days,
            "demo_seconds": demo_seconds,
            "merges": merges,
            "counts": counts,
            "verify_seconds": seconds,
            "spark_start_seconds": start_only,
            "checked": document["merges"],
            "verdicts": verdicts,
            "machine": machine_info(),
        },
    )


if __name__ == "__main__":
    main()

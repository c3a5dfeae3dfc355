"""Run every benchmark as a subprocess, then print a summary table and the total wall time.

Each script runs with this interpreter (`--quick` passed through), its stdout
streamed here and its stderr (Spark, Kafka and librdkafka noise) kept in
bench/results/logs/<name>[_quick].log; a failing script's stderr tail is printed.
Every script keeps its own JSON in bench/results/; the summary goes to
bench/results/run_all[_quick].json.

Run: .venv/bin/python bench/run_all.py [--quick] [--only NAME ...] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compactor.dev import SHORT_RUN_JVM_OPTIONS
from harness.report import RESULTS, machine_info, print_table, save_results
from harness.targets import verdict_summary

BENCH = Path(__file__).parent
SCRIPTS = [
    "plan_scale",
    "write_amplification",
    "query_benefit",
    "merge_throughput",
    "latency",
    "startup",
    "capacity",
    "freshness",
    "console_pages",
    "upsert_scale",
    "log_upkeep",
    "catalog_growth",
    "verify_demo",
    "years",
]
# whose full run is taken by hand (years.py: about 45 minutes, freshness.py about 21, past the
# per-script timeout); the full suite runs them only when named with --only, the smoke run always
BY_HAND = {"years", "freshness"}


def _load(name: str, quick: bool) -> dict[str, Any] | None:
    path = RESULTS / (f"{name}_quick.json" if quick else f"{name}.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _plan_scale(d: dict[str, Any]) -> str:
    largest = max(r["segments"] for r in d["rows"])
    rows = [r for r in d["rows"] if r["segments"] == largest]
    parts = ", ".join(
        f"{r['family']} {r['seconds']:.3f}s ({1000 * r.get('one_event_seconds', 0):.1f} ms after one load)"
        for r in rows
    )
    return f"{largest:,} segments: {parts}"


def _write_amplification(d: dict[str, Any]) -> str:
    short = {
        "time layers [day, week, month]": "layers",
        "level thresholds [4, 3]": "levels",
        "size threshold 1GB": "size",
        "bin packing (default pools)": "binpack",
        "bin packing (pools 1d wide)": "binpack-1d",
        "naive: merge all on every load": "naive",
    }
    return "WA " + ", ".join(
        f"{short.get(p['policy'], p['policy'])} {p['write_amplification']:.2f}x" for p in d["policies"]
    )


def _query_benefit(d: dict[str, Any]) -> str:
    point = {s["state"].split(" (")[0]: s["queries"]["point"]["files_read"] for s in d["states"]}
    files = ", ".join(f"{state} {n}" for state, n in point.items())
    rate = d["verdicts"]["merge_rate_vs_optimize"]["value"]
    return f"point query files read: {files}; zorder merge {rate:.2f}x OPTIMIZE ZORDER BY's MiB/s"


# what our merge is compared with in each of merge_throughput's pairs (OPTIMIZE where not named)
PARTNERS = {"parquet": "raw Parquet", "ours": "ours, a task per file", "ours_uncertified": "ours uncertified"}


def _merge_throughput(d: dict[str, Any]) -> str:
    s = d["summary"]
    return "; ".join(
        f"pair {p['pair'][0]}: ours {s[p['ours']]['mb_per_s_median']:.1f} vs "
        f"{PARTNERS.get(p['optimize'], 'OPTIMIZE')} "
        f"{s[p['optimize']]['mb_per_s_median']:.1f} MiB/s = {p['ratio_ours_over_optimize']:.2f}x"
        for p in d["pairs"]
    ) + ("" if d.get("all_checksums_match") else "; CHECKSUM MISMATCH")


def _latency(d: dict[str, Any]) -> str:
    v, c, f = d["commit_visible_ms"], d["result_consumed_ms"], d["floor_ms"]
    if not v["n"]:
        return "no samples"
    phases = d.get("job", {}).get("phases", {})
    batch = sum(p["seconds"] for p in phases.values()) or 1.0
    catalog = phases.get("catalog", {}).get("seconds", 0.0) / batch
    ratio = v["p50"] / f["p50"] if f["p50"] else float("inf")
    work = d.get("spark_work")
    return (
        f"commit p50/p95/p99 {v['p50']:.0f}/{v['p95']:.0f}/{v['p99']:.0f} ms, {ratio:.1f}x the floor, "
        f"result p50 {c['p50']:.0f} ms "
        f"(n={v['n']}); floor p50/p99 {f['p50']:.0f}/{f['p99']:.0f} ms; catalog {catalog:.0%} of batch time"
        + (
            f"; {work['jobs_per_merge']:.2f} Spark jobs, {work['state_rebuilds']} state rebuilds per merge cycle"
            if work
            else ""
        )
    )


def _startup(d: dict[str, Any]) -> str:
    line = ", ".join(
        f"{r['tables']:,} table(s) x {r['segments'] // r['tables']:,} segments {r['total_s']:.1f}s"
        for r in d["rows"]
    )
    restarts = {r["start"]: r["processed"] for r in d.get("restarts", [])}
    again = restarts.get("restart after SIGKILL")
    if again is None:
        return line
    return line + (
        f"; `compactor run` to an event: restart after SIGKILL {again:.1f}s, cold {restarts['cold start']:.1f}s, "
        f"waiting out the session {restarts['restart as a newcomer']:.1f}s"
    )


def _capacity(d: dict[str, Any]) -> str:
    local = {r["concurrency"]: r for r in d["drains"] if r["master"] == "local[2]"}
    at4, cpu4 = local[4]["merges_per_s"], local[4]["cpu_seconds_per_merge"]
    work = local[4].get("spark_work") or {}
    steady = next(s for s in d["steady"] if s["concurrency"] == 4)["event_to_commit_during_big_ms"]["p99"]
    return (
        f"drain at 4: {at4:.2f} merges/s, {cpu4:.2f} CPU-s/merge"
        + (
            f", {work['jobs_per_merge']:.2f} Spark jobs and {work['state_rebuilds_per_merge']:.2f} state rebuilds "
            "per merge"
            if work
            else ""
        )
        + f"; {d['speedup_4_vs_1']:.2f}x over 1; p99 beside the big merge {steady:.0f} ms"
        + (
            f"; two jobs x local[1] {d['two_jobs_vs_one']:.2f}x one on local[2]"
            if "two_jobs_vs_one" in d
            else ""
        )
    )


def _console_pages(d: dict[str, Any]) -> str:
    pages = d["pages"]
    first = pages["warehouse page, the first after a start"]["median_s"]
    rows = pages["  ... until it has its rows"]["median_s"]
    stale = pages["warehouse page, its copy stale"]["median_s"]
    return (
        f"warehouse page for {d['params']['tables']:,} tables {first:.2f} s first "
        f"(its rows after {rows:.2f} s), {stale:.2f} s after "
        f"(its copy {d['copy_s']:.2f} s); longest hold of the job's lock {d['longest_lock_hold_ms']:.0f} ms"
    )


def _upsert_scale(d: dict[str, Any]) -> str:
    memory = d["memory"]
    restarts = d.get("restarts") or [{}]
    restart = restarts[-1].get("restart_to_first_attempt_seconds")
    return (
        f"key index {memory['bytes_per_key']:.1f} B a key; a load's update "
        f"{d['update_ratio']:.2f}x in a table of 10x the keys"
        + (
            f"; restart to first attempt {restart:.1f} s at {restarts[-1]['table_keys']:,} keys"
            if restart is not None
            else ""
        )
    )


def _years(d: dict[str, Any]) -> str:
    def slope(key: str) -> str:
        return "-" if d.get(key) is None else f"{d[key]:+.2f}"

    r = d["results"]
    return (
        f"{d['tables']} tables, {d['merges']:,} merges: rows lost/doubled "
        f"{d['rows_lost']}/{d['rows_duplicated']}, outcomes given twice/never {r['given_twice']}/"
        f"{r['never_given']}, commits without a SUCCEEDED {r['commits_without_success']}, healthy "
        f"quarantined {d['healthy_quarantined']}, failing table quarantined "
        f"{d['failing_table_quarantined_at_end']}; MiB per 1,000 merges: PSS "
        f"{slope('rss_slope_mib_per_1000_merges')}, heap {slope('heap_slope_mib_per_1000_merges')}; "
        f"job exits on its own {len(d['job_exits_on_its_own'])}"
    )


def _log_upkeep(d: dict[str, Any]) -> str:
    log, opens = d["log"], d["cold_open"]
    ratios = ", ".join(
        f"{r} {o['kept_vs_fresh']:.2f}x (without checkpoints {o['bare_vs_fresh']:.2f}x)"
        for r, o in opens.items()
    )
    return (
        f"{d['loads']:,} delta-rs loads, {d['merges']} merges: JSON commits since a checkpoint at most "
        f"{log['json_commits_since_checkpoint_max']} (K {log['checkpoint_every']}); cold open as kept vs "
        f"freshly checkpointed: {ratios}"
    )


def _catalog_growth(d: dict[str, Any]) -> str:
    end = d["samples"][-1]
    return (
        f"catalog after {d['merges']:,} merges: {end['data_files']} data files, {end['log_files']} log files, "
        f"{end['total_mib']:.1f} MiB ({d['mib_per_1000_merges_after_half']:.2f} MiB per 1,000 merges); "
        f"live files {d['live_files_second_half_vs_first']:.2f}x in the second half against the first, log "
        f"commits since a checkpoint at most {d['log_commits_since_checkpoint_max']}"
    )


def _verify_demo(d: dict[str, Any]) -> str:
    counts = d["counts"]
    return (
        f"verify on the demo's table: {d['merges']} merges, {counts['holds']} hold, {counts['broken']} "
        f"broken; {d['verify_seconds']:.1f} s wall (Spark's start {d['spark_start_seconds']:.1f} s)"
    )


def _freshness(d: dict[str, Any]) -> str:
    steps = ", ".join(
        f"{s['rate_per_s']:g}/s p99 {s['wait_s']['p99'] or 0:.2f} s{'' if s['within_target'] else ' (over)'}"
        for s in d["steps"]
    )
    best = (
        f"highest sustained {d['rate_per_s']:g} loads/s" if d["rate_per_s"] else "no step within the target"
    )
    return f"{d['tables']} tables, eligible -> commit by load rate: {steps}; {best}, headroom {100 * d['headroom']:.0f}%"


HEADLINES: dict[str, Callable[[dict[str, Any]], str]] = {
    "freshness": _freshness,
    "verify_demo": _verify_demo,
    "years": _years,
    "catalog_growth": _catalog_growth,
    "log_upkeep": _log_upkeep,
    "upsert_scale": _upsert_scale,
    "console_pages": _console_pages,
    "capacity": _capacity,
    "startup": _startup,
    "plan_scale": _plan_scale,
    "write_amplification": _write_amplification,
    "query_benefit": _query_benefit,
    "merge_throughput": _merge_throughput,
    "latency": _latency,
}


def _headline(script: str, data: dict[str, Any]) -> str:
    """The script's figures in a line, then its verdicts (saved with its results)."""
    verdicts = verdict_summary(data)
    return HEADLINES[script](data) + (f" ({verdicts})" if verdicts else "")


def run(name: str, quick: bool, timeout: float, logs: Path) -> dict[str, Any]:
    """Run one script in its own process group; kill the group on timeout or Ctrl-C."""
    cmd = [sys.executable, str(BENCH / f"{name}.py"), *(["--quick"] if quick else [])]
    log = logs / (f"{name}_quick.log" if quick else f"{name}.log")
    print(f"\n=== {name} {'--quick ' if quick else ''}(stderr: {log})", flush=True)
    began = time.perf_counter()
    status = "ok"
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=None, stderr=err, cwd=BENCH.parent, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
            if code != 0:
                status = f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout:.0f}s"
            _kill_group(proc)
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    seconds = time.perf_counter() - began
    if status != "ok":
        tail = deque(log.read_text(errors="replace").splitlines(), maxlen=25)
        print(f"--- {name} {status}; end of its stderr:\n" + "\n".join(tail), flush=True)
    return {"script": name, "status": status, "seconds": seconds, "log": str(log.relative_to(BENCH.parent))}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's own process group (its JVMs and broker too), SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script (CI smoke run)")
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, help="run only these scripts")
    parser.add_argument("--timeout", type=float, default=1200, help="per-script timeout in seconds (1200)")
    args = parser.parse_args()
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if args.quick:  # a smoke run's JVMs live minutes: JIT settings for that (yours win)
        os.environ.setdefault("SPARK_SUBMIT_OPTS", SHORT_RUN_JVM_OPTIONS)
    machine = machine_info()
    began = time.perf_counter()
    names = args.only or [n for n in SCRIPTS if args.quick or n not in BY_HAND]
    results = [run(name, args.quick, args.timeout, logs) for name in names]
    total = time.perf_counter() - began
    for r in results:
        data = _load(r["script"], args.quick) if r["status"] == "ok" else None
        try:
            r["headline"] = _headline(r["script"], data) if data else "-"
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            r["headline"] = f"(summary unavailable: {exc!r})"
    print(f"\n=== summary ({'quick' if args.quick else 'full'} run)\n")
    print_table(
        ["script", "status", "seconds", "headline"],
        [[r["script"], r["status"], r["seconds"], r["headline"]] for r in results],
        left=(0, 3),
    )
    print(f"\ntotal wall time {total:.0f}s ({total / 60:.1f} min)")
    save_results("run_all", args.quick, {"machine": machine, "scripts": results, "total_seconds": total})
    if any(r["status"] != "ok" for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

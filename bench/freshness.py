"""Freshness at warehouse scale: how long a merge waits between becoming eligible and its commit,
for one job (`compactor run`, local[2], its own process) beside many tables under a steady stream
of loads, at a staircase of load rates; the highest rate whose p99 stays within the target.

- **Tables**: two in three `auto_merge` [day, week] (Kylin's time layers) loaded 6 hours at a
  time, so a day merges at its fourth load and a week at its seventh day; one in three `bin_pack`
  (Hydrolix) with one pool a day wide, so each load after a day's first merges into it.
- **Warm-up**: each table's first merge (a day of four loads; two loads to pack) before the clock
  starts. A table's first merge after a start costs more than later ones (issue: cold tables,
  bench/README), a cost this benchmark leaves to capacity.py.
- **Loads**: written by delta-rs in this process (not the job's), each to a table drawn at random,
  as a Poisson stream at the step's rate; each step lasts `--window` seconds.
- **Eligible**: a plan can run once its last input is known to the job: a load's event produced,
  or the commit of the merge whose output it merges further (its completion event follows that
  commit). Both rules merge as soon as they can (no age, schedule or backlog in them), so that is
  when the plan came due; freshness = the merge's commit (its log file's time) - eligible. A plan
  counts in the step in which it came due.
- **Debt**: plans due and not committed, from the same record, every second; its trend per step
  (plans per minute, least squares): a step is sustained when it does not grow.
- **Headroom**: the machine's idle share of its two cores during the step (beside the job and the
  loads); the job's own share is printed too.

After the last step the loads stop and the job drains; every due plan then has its commit.

Run: .venv/bin/python bench/freshness.py [--quick] [--tables N] [--rates R,R,...] [--window S]
Saves bench/results/freshness[_quick].json and bench/results/freshness[_quick].png; a table count
other than the shape's (`--tables`) saves freshness_<N>[_quick].json and .png.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from harness.job_process import JobProcess, run_args
from harness.loads import bench_topics, completed, write_segments
from harness.report import bench_parser, machine_info, percentiles, print_table, save_results
from harness.services import kafka_bootstrap
from harness.targets import Target, judge

P99_TARGET_S = 3.0
TARGETS = (Target("p99_s", "p99 eligible -> commit at the highest sustained rate", P99_TARGET_S, unit=" s"),)
WIDTH = timedelta(hours=6)  # a load's span: four make a day
ROWS = 50  # rows a load
FIRST_LOADS = {"auto": 4, "pack": 2}  # the loads of a table's first merge (the warm-up)
CORES = os.cpu_count() or 1  # the machine's: the job runs on local[2]
DEBT_EVERY_S = 1.0
WARM_S_A_TABLE = 0.6  # the warm-up's bound: 1,000 first merges took 267 s (2026-11-29)


@dataclass(frozen=True)
class Shape:
    tables: int
    rates: tuple[float, ...]  # loads a second, one step each, rising
    window_s: float  # each step's length
    concurrency: int = 4  # operations.max_concurrent_merges


QUICK = Shape(tables=15, rates=(2.0, 4.0), window_s=30)
FULL = Shape(tables=1000, rates=(1.0, 2.0, 3.0, 4.0), window_s=240)


def kind(table: str) -> str:
    return "pack" if int(table[1:]) % 3 == 2 else "auto"


def config(tables: list[str], concurrency: int) -> dict[str, Any]:
    """Time layers by default; every third table bin-packed in one pool a day wide (the default
    pools are an hour wide and would merge no 6-hour load)."""
    pack = {
        "rules": [
            {
                "rule": "bin_pack",
                "pools": [{"name": "day", "max_age": "3650d", "max_size": "1GB", "max_width": "1d"}],
            }
        ]
    }
    return {
        "defaults": {"rules": [{"rule": "auto_merge", "levels": ["day", "week"]}]},
        "tables": {t: pack for t in tables if kind(t) == "pack"},
        "operations": {"max_concurrent_merges": concurrency},
    }


# -- the loads --------------------------------------------------------------------------------


@dataclass
class Loads:
    """Every load written and when its event was produced (epoch seconds), by segment id."""

    warehouse: Path
    kafka: KafkaSettings
    producer: EventProducer
    next_slot: dict[str, int] = field(default_factory=dict)
    known_at: dict[str, float] = field(default_factory=dict)
    written: int = 0

    def load(self, table: str, count: int = 1) -> None:
        first = self.next_slot.get(table, 0)
        slots = list(range(first, first + count))
        segments = write_segments(str(self.warehouse / table), table, slots, ROWS, width=WIDTH)
        self.producer.send_all(
            [(self.kafka.segments_topic, t, v, None) for t, _, v, _ in completed(segments)]
        )
        now = time.time()
        for s in segments:
            self.known_at[s.id] = now
        self.next_slot[table] = first + count
        self.written += count


def poisson(loads: Loads, tables: list[str], rate: float, seconds: float, rng: random.Random) -> float:
    """Loads at `rate` a second for `seconds`, gaps drawn from the exponential distribution; the
    rate achieved (writing a load takes time of its own, so a rate the loader cannot reach shows)."""
    began = time.time()
    due, done = began, 0
    while True:
        due += rng.expovariate(rate)
        if due - began >= seconds:
            break
        time.sleep(max(0.0, due - time.time()))
        loads.load(rng.choice(tables))
        done += 1
    time.sleep(max(0.0, began + seconds - time.time()))
    return done / (time.time() - began)


# -- what the logs say ------------------------------------------------------------------------


def merges(warehouse: Path, tables: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Every merge commit of every table (of `tables` only, if given): when its log file was
    written, its inputs and output."""
    found = []
    names = sorted(tables) if tables is not None else sorted(p.name for p in warehouse.iterdir())
    for table in (warehouse / n for n in names if (warehouse / n / "_delta_log").is_dir()):
        for path in sorted((table / "_delta_log").glob("*.json")):
            for line in path.read_text().splitlines():
                info = json.loads(line).get("commitInfo")
                meta = json.loads(info.get("userMetadata") or "null") if info else None
                if isinstance(meta, dict) and meta.get("op") == "merge":
                    found.append(
                        {
                            "table": table.name,
                            "committed": path.stat().st_mtime,
                            "removed": meta["removed"],
                            "added": [a["id"] for a in meta["added"]],
                            "level": meta.get("level"),
                        }
                    )
    return found


def due_times(found: list[dict[str, Any]], known_at: dict[str, float]) -> list[dict[str, Any]]:
    """Each merge with the moment it came due (None when an input is unknown); merges in commit
    order, so that a merge's output is known before a later merge takes it."""
    known = dict(known_at)
    out = []
    for m in sorted(found, key=lambda m: m["committed"]):
        inputs = [known.get(sid) for sid in m["removed"]]
        due = max(inputs) if inputs and None not in inputs else None  # type: ignore[type-var]
        out.append(m | {"due": due, "wait_s": None if due is None else m["committed"] - due})
        for sid in m["added"]:
            known[sid] = m["committed"]
    return out


def debt_trend(timed: list[dict[str, Any]], start: float, end: float) -> tuple[list[int], float]:
    """Plans due and not yet committed each second of [start, end), and their slope a minute."""
    dues = np.array([m["due"] for m in timed if m["due"] is not None])
    commits = np.array([m["committed"] for m in timed if m["due"] is not None])
    ticks = np.arange(start, end, DEBT_EVERY_S)
    debt = [int(np.sum((dues <= t) & (commits > t))) for t in ticks]
    slope = float(np.polyfit(ticks - start, debt, 1)[0]) * 60 if len(ticks) > 1 else 0.0
    return debt, slope


# -- the run ----------------------------------------------------------------------------------


def run(shape: Shape, work: Path, bootstrap: str) -> dict[str, Any]:
    kafka = bench_topics(bootstrap, f"fresh-{uuid.uuid4().hex[:6]}")
    warehouse = work / "warehouse"
    warehouse.mkdir()
    tables = [f"t{i:04d}" for i in range(shape.tables)]
    conf = work / "tables.yaml"
    conf.write_text(yaml.safe_dump(config(tables, shape.concurrency)))
    loads = Loads(warehouse, kafka, EventProducer(kafka))
    print(f"  writing each table's first merge ({shape.tables} tables) ...", flush=True)
    for t in tables:
        loads.load(t, FIRST_LOADS[kind(t)])
    job = JobProcess(run_args(conf, warehouse, work / "checkpoint", kafka), work / "job.log")
    began = time.time()
    job.start()
    unmerged = set(tables)  # each poll reads only the logs of tables still waiting for a merge

    def warm() -> bool:
        unmerged.difference_update(m["table"] for m in merges(warehouse, unmerged))
        return not unmerged

    wait_for(warm, job, max(1800, WARM_S_A_TABLE * shape.tables), "warm-up")
    wait_for(job.settled, job, 600, "idle after the warm-up")
    warm_s = time.time() - began
    print(f"  warm: every table merged once, {warm_s:.0f}s after the job's start", flush=True)
    rng = random.Random(11)
    tree = job.tree()
    steps = []
    for rate in shape.rates:
        cpu0, idle0, t0 = tree.cpu(), machine_idle(), time.time()
        achieved = poisson(loads, tables, rate, shape.window_s, rng)
        t1 = time.time()
        steps.append(
            {"rate_per_s": rate, "achieved_per_s": round(achieved, 2), "start": t0, "end": t1,
             "job_cpu_share": (tree.cpu() - cpu0) / ((t1 - t0) * CORES),
             "machine_idle": (machine_idle() - idle0) / ((t1 - t0) * CORES)}
        )  # fmt: skip
        print(f"  {rate:g} loads/s for {shape.window_s:.0f}s (reached {achieved:.2f}/s)", flush=True)
    ended = time.time()
    drained = wait_for(job.settled, job, 900, "the drain", fail=False)
    drain_s = time.time() - ended
    exit_code = job.stop()
    loads.producer.close()
    timed = due_times(merges(warehouse), loads.known_at)
    return summarize(shape, steps, timed, warm_s, drained, drain_s, exit_code, loads.written)


def machine_idle() -> float:
    """Seconds the machine's cores have sat idle since boot: the headroom left beside the job
    and its loads."""
    import psutil

    return float(psutil.cpu_times().idle)


def wait_for(check: Any, job: JobProcess, timeout: float, what: str, fail: bool = True) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not job.alive():
            raise RuntimeError(f"the job exited during {what}: {job.log.read_text()[-3000:]}")
        if check():
            return True
        time.sleep(1.0)
    if fail:
        raise TimeoutError(f"no {what} within {timeout:.0f}s")
    return False


def summarize(
    shape: Shape,
    steps: list[dict[str, Any]],
    timed: list[dict[str, Any]],
    warm_s: float,
    drained: bool,
    drain_s: float,
    exit_code: int | None,
    loads: int,
) -> dict[str, Any]:
    for step in steps:
        waits = [
            m["wait_s"] for m in timed if m["due"] is not None and step["start"] <= m["due"] < step["end"]
        ]
        debt, slope = debt_trend(timed, step["start"], step["end"])
        step |= {
            "merges": len(waits),
            "merges_per_s": round(len(waits) / (step["end"] - step["start"]), 2),
            "wait_s": percentiles(waits),
            "debt_slope_per_min": round(slope, 2),
            "debt_max": max(debt, default=0),
            # not growing: by less than 2% of the step's merges a minute (at least two plans: a
            # short step's slope moves by a plan or two as merges start and end)
            "sustained": slope <= max(2.0, 0.02 * 60 * len(waits) / (step["end"] - step["start"])),
            "job_cpu_share": round(step["job_cpu_share"], 2),
            "machine_idle": round(step["machine_idle"], 2),
        }
        step["within_target"] = step["sustained"] and (step["wait_s"]["p99"] or 0) <= P99_TARGET_S
    best = max((s for s in steps if s["within_target"]), key=lambda s: s["rate_per_s"], default=None)
    chosen = best or steps[0]
    return {
        "benchmark": "freshness",
        "tables": shape.tables,
        "rates_tried": list(shape.rates),
        "window_s": shape.window_s,
        "concurrency": shape.concurrency,
        "rate_per_s": best["rate_per_s"] if best else None,
        "p50_s": chosen["wait_s"]["p50"],
        "p99_s": chosen["wait_s"]["p99"] if best else None,
        "max_s": chosen["wait_s"]["max"],
        "debt_trend": chosen["debt_slope_per_min"],
        "headroom": chosen["machine_idle"],
        "steps": [{k: v for k, v in s.items() if k not in ("start", "end")} for s in steps],
        "merges_by_level": dict(Counter(str(m["level"]) for m in timed)),
        "merges_unknown_due": sum(1 for m in timed if m["due"] is None),
        "loads": loads,
        "warm_up_s": round(warm_s, 1),
        "drained": drained,
        "drain_s": round(drain_s, 1),
        "job_exit_code": exit_code,
    }


def report(payload: dict[str, Any]) -> None:
    print_table(
        ["loads/s", "reached", "merges/s", "p50 s", "p99 s", "max s", "debt/min", "job CPU", "ok"],
        [
            [
                f"{s['rate_per_s']:g}",
                f"{s['achieved_per_s']:.2f}",
                f"{s['merges_per_s']:.2f}",
                _s(s["wait_s"]["p50"]),
                _s(s["wait_s"]["p99"]),
                _s(s["wait_s"]["max"]),
                f"{s['debt_slope_per_min']:+.2f}",
                f"{100 * s['job_cpu_share']:.0f}%",
                "yes" if s["within_target"] else "no",
            ]
            for s in payload["steps"]
        ],
    )
    rate = payload["rate_per_s"]
    if rate is None:
        print(f"\nno step kept p99 within {P99_TARGET_S:g} s with a flat debt")
    else:
        print(
            f"\nhighest sustained rate {rate:g} loads/s ({payload['tables']} tables): p50 "
            f"{payload['p50_s']:.2f} s, p99 {payload['p99_s']:.2f} s, max {payload['max_s']:.2f} s; "
            f"headroom {100 * payload['headroom']:.0f}% of {CORES} cores"
        )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def plot(path: Path, payload: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = payload["steps"]
    fig, ax = plt.subplots(figsize=(7, 4))
    rates = [s["rate_per_s"] for s in steps]
    ax.plot(rates, [s["wait_s"]["p99"] for s in steps], "o-", label="p99")
    ax.plot(rates, [s["wait_s"]["p50"] for s in steps], "s--", label="p50")
    ax.axhline(P99_TARGET_S, color="grey", linestyle=":", label=f"target p99 {P99_TARGET_S:g} s")
    ax.set_xlabel("loads a second (Poisson, across the tables)")
    ax.set_ylabel("eligible -> commit (s)")
    ax.set_title(f"Freshness: {payload['tables']} tables, one job on local[2]")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = bench_parser(
        __doc__, f"{QUICK.tables} tables, loads at {QUICK.rates} a second, {QUICK.window_s:.0f} s each"
    )
    parser.add_argument("--tables", type=int)
    parser.add_argument("--rates", help="loads a second, one step each: 2,4,6")
    parser.add_argument("--window", type=float, help="seconds a step")
    args = parser.parse_args()
    shape = QUICK if args.quick else FULL
    if args.tables:
        shape = replace(shape, tables=args.tables)
    if args.rates:
        shape = replace(shape, rates=tuple(float(r) for r in args.rates.split(",")))
    if args.window:
        shape = replace(shape, window_s=args.window)
    print(
        f"freshness: {shape.tables} tables, rates {list(shape.rates)} loads/s, {shape.window_s:.0f}s a step"
    )
    work = Path(tempfile.mkdtemp(prefix="freshness-"))
    began = time.time()
    try:
        with kafka_bootstrap(work) as bootstrap:
            payload = run(shape, work, bootstrap)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload["quick"] = args.quick
    payload["total_seconds"] = round(time.time() - began, 1)
    payload["machine"] = machine_info()
    payload["verdicts"] = judge(TARGETS, payload)
    report(payload)
    # another table count than the shape's keeps its own results: freshness.json is the 1,000's
    default = (QUICK if args.quick else FULL).tables
    path = save_results(
        "freshness" if shape.tables == default else f"freshness_{shape.tables}", args.quick, payload
    )
    plot(path.with_suffix(".png"), payload)


if __name__ == "__main__":
    main()

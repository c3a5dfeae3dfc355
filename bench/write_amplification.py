"""Write amplification per policy: a month of hourly loads through the pure simulation (no Spark).

720 hourly segments (April 2024, 30 days) of 64 MB each, loaded when their hour
ends (`loaded_at = end`), arrive one by one in `compactor.rules.simulation.Simulation`,
which runs the planners exactly as the stream would (each merge triggers another
attempt) at `now = loaded_at`. Policies:

- time layers: auto_merge, levels [day, week, month]
- the same, with well-sized files moved instead of rewritten (what the job does by default:
  `promote_files_over`, half the 256 MiB write target)
- the same, with a write-amplification budget of 1.5 (`max_write_amplification`): day
  merges always run, week and month merges only while their bytes fit the budget
- level thresholds: minor, [4, 3]
- size threshold: major, 1 GB, trigger on_load
- bin packing: bin_pack with the default pools. Their max width is 1 h, so two
  hourly segments (2 h together) never fit one bin: expect no merges at all.
- bin packing, pools widened to 1 d (not a default, shown for contrast)
- naive: after every load, all current segments merge into one (implemented here).

Late data (a second table): the same hourly loads, plus a 4 MB straggler every 3 hours
for an hour 1 to 7 days back (overlapping data already there), with time layers
[day, week, month] and `sealing`. Policies: every straggler folded at once into what
it overlaps (`allowed_lateness: 30d`, so nothing is sealed), and sealed with the
default `late_fold_ratio` 0.1 (and `max_late_segments` 16, then 200). Reported beside WA: the bytes folds rewrote per late byte
(bounded by 1 + 1/r when sealed) and the most late segments waiting at once.

Write amplification = bytes rewritten by merges / bytes ingested (0 = never
rewritten; the total written is (1 + WA) x ingested). Also the segment count after
each load, plotted for all policies to bench/results/write_amplification[_quick].png.

Run: .venv/bin/python bench/write_amplification.py [--quick]  (quick: 3 days)
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from compactor.config.loading import load_config
from compactor.delta.rewrite.promote import PROMOTE_MIN_FILE_BYTES
from compactor.domain.segments import Segment, TimeRange
from compactor.rules.late_data import is_fold
from compactor.rules.simulation import Simulation
from harness.report import MIB, RESULTS, machine_info, print_table, save_results

START = datetime(2024, 4, 1, tzinfo=UTC)  # April has 30 days: the month bucket completes
TABLE = "wa"
SEGMENT_BYTES = 64 * MIB
GIB = 1024 * MIB

WIDE_POOLS = [
    {"name": "small", "max_age": "10m", "max_size": "1GB", "max_width": "1d"},
    {"name": "medium", "min_age": "10m", "max_age": "70m", "max_size": "2GB", "max_width": "1d"},
    {"name": "large", "min_age": "70m", "max_age": "90d", "max_size": "4GB", "max_width": "1d"},
]

TIME_LAYERS = {"rule": "auto_merge", "levels": ["day", "week", "month"]}
PROMOTED = "time layers, well-sized files moved"
BUDGETED = "time layers, WA budget 1.5"
BUDGET = 1.5  # max_write_amplification of the budgeted policy
POLICIES: dict[str, dict[str, Any] | None] = {
    "time layers [day, week, month]": TIME_LAYERS,
    PROMOTED: TIME_LAYERS,
    BUDGETED: TIME_LAYERS,
    "level thresholds [4, 3]": {"rule": "minor", "level_thresholds": [4, 3]},
    "size threshold 1GB": {"rule": "major", "size_threshold": "1GB", "trigger": "on_load"},
    "bin packing (default pools)": {"rule": "bin_pack"},
    "bin packing (pools 1d wide)": {"rule": "bin_pack", "pools": WIDE_POOLS},
    "naive: merge all on every load": None,
}


@dataclass
class Outcome:
    policy: str
    counts: list[int] = field(default_factory=list)  # segments after each load (and its cascade)
    merges: int = 0
    promoted: int = 0  # merges that moved some inputs' files instead of rewriting them
    rewritten: int = 0
    largest_merge: int = 0
    seconds: float = 0.0


def hourly_loads(hours: int) -> list[Segment]:
    out = []
    for h in range(hours):
        start = START + timedelta(hours=h)
        end = start + timedelta(hours=1)
        out.append(Segment(f"h{h:04d}", TABLE, TimeRange(start, end), loaded_at=end, bytes=SEGMENT_BYTES))
    return out


def simulate(
    policy: str,
    rule: dict[str, Any],
    loads: list[Segment],
    promote_over: int | None = None,
    budget: float | None = None,
) -> Outcome:
    """With `promote_over`, a merge moves the files of inputs whose files are all at least that
    large and rewrites only the others (as `compactor.delta.rewrite.promote` does). A rewrite writes
    files of about the target size, so they are at least half the target when its bytes are;
    a 64 MB load is one small file. With `budget`, the table's max_write_amplification."""
    sim = Simulation(load_config({"defaults": {"rules": [rule], "max_write_amplification": budget}}))
    out = Outcome(policy)
    well_sized: set[str] = set()
    began = time.perf_counter()
    for segment in loads:
        before = len(sim.merges)
        sim.arrive(segment)
        for plan in sim.merges[before:]:
            out.merges += 1
            # only inputs with a small file are rewritten; the others' files move
            rewrite = plan.output.bytes
            if promote_over is not None:
                rewrite = sum(s.bytes for s in plan.inputs if s.id not in well_sized)
                out.promoted += rewrite < plan.output.bytes
                if rewrite == 0 or rewrite >= promote_over:  # new files of at least half the target
                    well_sized.add(plan.output.id)
            out.rewritten += rewrite
            out.largest_merge = max(out.largest_merge, rewrite)
        out.counts.append(len(sim.catalog.segments(TABLE)))
    out.seconds = time.perf_counter() - began
    return out


LATE_BYTES = 4 * MIB
LATE_POLICIES: dict[str, dict[str, Any]] = {
    "late data folded at once (nothing sealed)": TIME_LAYERS | {"sealing": {"allowed_lateness": "30d"}},
    "late data sealed, late_fold_ratio 0.1": TIME_LAYERS | {"sealing": {"late_fold_ratio": 0.1}},
    "late data sealed, ratio 0.1, max_late_segments 200": TIME_LAYERS
    | {"sealing": {"late_fold_ratio": 0.1, "max_late_segments": 200}},
}


def with_stragglers(loads: list[Segment]) -> list[Segment]:
    """The loads, and after every third one a 4 MB straggler for an hour 1 to 7 days back."""
    rng = random.Random(7)
    out: list[Segment] = []
    for i, segment in enumerate(loads):
        out.append(segment)
        back = rng.randrange(24, 7 * 24)
        if i % 3 == 2 and i >= back:
            start = loads[i - back].start
            span = TimeRange(start + timedelta(minutes=10), start + timedelta(minutes=20))
            arrives = segment.loaded_at + timedelta(minutes=1)
            out.append(Segment(f"late{i:04d}", TABLE, span, loaded_at=arrives, bytes=LATE_BYTES))
    return out


def late_outcome(policy: str, rule: dict[str, Any], loads: list[Segment]) -> dict[str, Any]:
    """The late-data table under `rule`: WA, what folds rewrote per late byte, late segments waiting."""
    sim = Simulation(load_config({"defaults": {"rules": [rule]}}))
    rewritten = folded = fold_count = most_waiting = 0
    for segment in loads:
        before = len(sim.merges)
        sim.arrive(segment)
        for plan in sim.merges[before:]:
            rewritten += plan.bytes_in
            if is_fold(plan):
                fold_count += 1
                folded += plan.bytes_in
        waiting = sum(1 for s in sim.catalog.segments(TABLE) if s.id.startswith("late"))
        most_waiting = max(most_waiting, waiting)
    late_bytes = sum(s.bytes for s in loads if s.id.startswith("late"))
    ingested = sum(s.bytes for s in loads)
    return {
        "policy": policy,
        "rule": rule,
        "late_loads": sum(1 for s in loads if s.id.startswith("late")),
        "late_bytes": late_bytes,
        "ingested_bytes": ingested,
        "merges": len(sim.merges),
        "folds": fold_count,
        "bytes_rewritten": rewritten,
        "write_amplification": rewritten / ingested,
        "fold_bytes_per_late_byte": folded / late_bytes if late_bytes else 0.0,
        "most_late_waiting": most_waiting,
        "final_segments": len(sim.catalog.segments(TABLE)),
    }


def naive(policy: str, loads: list[Segment]) -> Outcome:
    """After every load, every current segment merges into one."""
    out = Outcome(policy)
    began = time.perf_counter()
    current: list[int] = []
    for segment in loads:
        current.append(segment.bytes)
        if len(current) > 1:
            total = sum(current)
            out.merges += 1
            out.rewritten += total
            out.largest_merge = max(out.largest_merge, total)
            current = [total]
        out.counts.append(len(current))
    out.seconds = time.perf_counter() - began
    return out


def plot(outcomes: list[Outcome], path: Path, days: int) -> None:
    fig, ax = plt.subplots(figsize=(11, 6.5), dpi=110)
    for o, style in zip(outcomes, ["-", "--", "-.", ":", "-", "--"], strict=False):
        hours = [h / 24 for h in range(1, len(o.counts) + 1)]
        ax.step(hours, o.counts, where="post", linestyle=style, linewidth=1.8, label=o.policy)
    ax.set_yscale("log")
    ax.set_xlim(0, days)
    ax.set_xlabel("days since 2024-04-01 (one 64 MB segment loaded per hour)")
    ax.set_ylabel("segments in the table after each load (log scale)")
    ax.set_title(f"Segment count over time per compaction policy ({days * 24} hourly loads)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 days instead of 30 (CI smoke run)")
    args = parser.parse_args()
    days = 3 if args.quick else 30
    loads = hourly_loads(days * 24)
    ingested = sum(s.bytes for s in loads)
    outcomes = [
        naive(name, loads)
        if rule is None
        else simulate(
            name,
            rule,
            loads,
            PROMOTE_MIN_FILE_BYTES if name == PROMOTED else None,
            BUDGET if name == BUDGETED else None,
        )
        for name, rule in POLICIES.items()
    ]
    print(f"{len(loads)} hourly loads of {SEGMENT_BYTES // MIB} MB = {ingested / GIB:.1f} GiB ingested\n")
    print_table(
        [
            "policy",
            "merges",
            "moved",
            "GiB rewritten",
            "write ampl.",
            "largest merge GiB",
            "max segs",
            "final segs",
            "mean segs",
            "sim s",
        ],
        [
            [
                o.policy,
                o.merges,
                o.promoted,
                o.rewritten / GIB,
                f"{o.rewritten / ingested:.2f}x",
                o.largest_merge / GIB,
                max(o.counts),
                o.counts[-1],
                sum(o.counts) / len(o.counts),
                o.seconds,
            ]
            for o in outcomes
        ],
    )
    by_name = {o.policy: o for o in outcomes}
    notes = [
        "write ampl. = bytes rewritten by merges / bytes ingested (total written = 1 + that).",
        f"moved: merges that moved the files of inputs whose files were all at least {PROMOTE_MIN_FILE_BYTES // MIB} MiB\n"
        "  (half the write target) into the output, rewriting only the other inputs (promote_files_over).",
    ]
    if by_name["bin packing (default pools)"].merges == 0:
        notes.append(
            "bin packing with the default pools never merged: every pool's max width is 1 h and two\n"
            "  adjacent hourly segments span 2 h, so no bin holds more than one segment."
        )
    major = by_name["size threshold 1GB"]
    if major.counts[-1] > major.counts[len(major.counts) // 2]:
        notes.append(
            f"size threshold stopped merging once one segment reached {major.largest_merge // MIB} MB: the walk\n"
            "  (oldest first) takes it, then every 64 MB load would bring the total to the 1 GB threshold\n"
            "  and is skipped, so nothing else is ever collected and the count grows with every load."
        )
    print("\n" + "\n".join(notes))
    late_loads = with_stragglers(loads)
    late = [late_outcome(name, rule, late_loads) for name, rule in LATE_POLICIES.items()]
    print(f"\nlate data: {late[0]['late_loads']} stragglers of {LATE_BYTES // MIB} MB among the loads")
    print_table(
        [
            "policy",
            "merges",
            "folds",
            "GiB rewritten",
            "write ampl.",
            "fold bytes / late byte",
            "most late waiting",
            "final segs",
        ],
        [
            [
                o["policy"],
                o["merges"],
                o["folds"],
                o["bytes_rewritten"] / GIB,
                f"{o['write_amplification']:.2f}x",
                f"{o['fold_bytes_per_late_byte']:.1f}",
                o["most_late_waiting"],
                o["final_segments"],
            ]
            for o in late
        ],
    )
    RESULTS.mkdir(exist_ok=True)
    png = RESULTS / ("write_amplification_quick.png" if args.quick else "write_amplification.png")
    plot(outcomes, png, days)
    print(f"plot {png}")
    save_results(
        "write_amplification",
        args.quick,
        {
            "machine": machine_info(),
            "params": {"hours": len(loads), "segment_bytes": SEGMENT_BYTES, "start": START.isoformat()},
            "ingested_bytes": ingested,
            "policies": [
                {
                    "policy": o.policy,
                    "rule": POLICIES[o.policy],
                    "merges": o.merges,
                    "merges_moving_files": o.promoted,
                    "bytes_rewritten": o.rewritten,
                    "write_amplification": o.rewritten / ingested,
                    "largest_merge_bytes": o.largest_merge,
                    "max_segments": max(o.counts),
                    "final_segments": o.counts[-1],
                    "mean_segments": sum(o.counts) / len(o.counts),
                    "simulation_seconds": o.seconds,
                    "segments_after_each_load": o.counts,
                }
                for o in outcomes
            ],
            "plot": str(png.relative_to(RESULTS.parent.parent)),
            "late_data": late,
        },
    )


if __name__ == "__main__":
    main()

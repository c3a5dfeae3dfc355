"""Planner scale: time of one evaluation for 10k, 100k and 1M segments per rule family.

Each family's table is in the state the stream keeps it in: what could merge
has merged, and one attempt scans everything to find what (little) is new.
- time_layers: hourly segments with one hour missing per day, levels
  [day, week, month]: nothing merges, so every level is scanned in full.
- level_thresholds [4, 3]: all level-2 (final) but 2 level-1 and 3 level-0 segments.
- size_threshold 1 GB: merged segments of 0.95-1.05 GB, oldest first: the oldest under the
  threshold is all a walk collects, so nothing merges until a small load arrives.
- bin_packing (default pools, first fit): 5-minute segments spread over 80 days,
  already merged to 3.5-4 GB, plus a small one every 200 (each joins a big bin).
- upsert_selection (30% invalid rows): 4M-row, 400 MB segments (merged already:
  over half the 5M-row output limit), most 0-29% invalid, every 1000th half
  invalid (those qualify and merge M:1 within 5M valid rows). The counts are in
  the catalog's columns, where the stream's key index notes them (after a load
  it notes only the segments whose count changed). The attempt after one load
  runs on the table with those merges done: the stream looks near a load only
  on a table whose last full evaluation had nothing to run.
- refresh (index check skipped: the recorded layouts): hourly segments of 300 MB that
  match the layout, one per hourly bucket (two would outgrow the 500 MB target), so
  nothing drifts; one new hour's load arrives.
Segments are read as the catalog keeps them: a `TableSegments` map whose
columns are updated as segments come and go (built before the timing; what
keeping them costs is timed apart, per segment added and removed at the largest
size). Timed with `explain=False`, the streaming hot path: a full evaluation, and an
attempt after one new load (the stream's usual attempt: it looks near the new
segment, which time layers, bin packing and level thresholds can narrow; the
others evaluate in full). Prints a table and saves bench/results/plan_scale.json. Run: .venv/bin/python bench/plan_scale.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from compactor.config.built_with import layout_record
from compactor.config.layout import LayoutConfig
from compactor.config.loading import load_config
from compactor.config.tables import TableSettings
from compactor.domain.columns import TableSegments
from compactor.domain.segments import Segment, TimeRange
from compactor.rules.engine import evaluate
from harness.report import save_results
from harness.targets import Target, judge

RESULTS = Path(__file__).parent / "results"
START = datetime(2020, 1, 1, tzinfo=UTC)
NOW = datetime(2030, 1, 1, tzinfo=UTC)
TARGETS = (
    Target(
        "one_event_ms", "planning after one event, the slowest family at the largest size", 10, unit=" ms"
    ),
    Target("growth_per_10x", "plan time growth per 10x segments, the steepest family", 11, unit="x"),
)


def hourly_with_daily_gap(n: int) -> list[Segment]:
    """Hourly segments, one hour missing per day: nothing can merge, so every level is scanned."""
    out: list[Segment] = []
    hour = 0
    while len(out) < n:
        if hour % 24 != 23:
            start = START + timedelta(hours=hour)
            out.append(
                Segment(f"h{hour}", "t", TimeRange(start, start + timedelta(hours=1)), loaded_at=start)
            )
        hour += 1
    return out


def loads(
    n: int,
    sizes: Callable[[int], int],
    width: timedelta = timedelta(hours=1),
    end: datetime = START,
    spacing: timedelta = timedelta(0),
    level: Callable[[int], int] = lambda i: 0,
    records: int = 0,
) -> list[Segment]:
    """n segments ending before `end`, `spacing` apart (plus jitter of up to an hour)."""
    rng = random.Random(7)
    out = []
    for i in range(n):
        start = end - width - spacing * i - timedelta(seconds=rng.randrange(0, 3600))
        out.append(
            Segment(
                f"s{i}",
                "t",
                TimeRange(start, start + width),
                loaded_at=START + timedelta(seconds=i),
                bytes=sizes(i),
                level=level(i),
                records=records,
            )
        )
    return out


def compacted_levels(n: int) -> list[Segment]:
    return loads(n, lambda i: 1 << 20, level=lambda i: 2 if i < n - 5 else (1 if i < n - 3 else 0))


def merged_stream(n: int) -> list[Segment]:
    return loads(
        n,
        lambda i: (1 + i % 50) << 20 if i % 200 == 0 else (3584 + i % 512) << 20,
        width=timedelta(minutes=5),
        end=NOW - timedelta(minutes=2),
        spacing=timedelta(days=80) / n,
    )


def upserted(n: int) -> list[Segment]:
    return loads(n, lambda i: 400 << 20, records=4_000_000)


def invalid_rows(segments: list[Segment]) -> dict[str, int]:
    """Invalid rows per segment, as the key index counts them."""
    return {
        s.id: s.records // 2 if i % 1000 == 0 else s.records * (i % 30) // 100 for i, s in enumerate(segments)
    }


def merged_near_threshold(n: int) -> list[Segment]:
    """Segments of 0.95-1.05 GB: any two exceed 1 GB, so a settled table for major compaction."""
    return loads(n, lambda i: 950_000_000 + (i * 7919) % 100_000_000)


def conforming_hours(n: int) -> list[Segment]:
    """Hourly segments built with the table's layout, one per hourly bucket, too big to pair."""
    record = layout_record(LayoutConfig.model_validate(LAYOUT), 1)
    return [
        replace(s, built_with=record, records=1_000_000)
        for s in loads(n, lambda i: 300 << 20, spacing=timedelta(hours=1))
    ]


def settings(rule: dict[str, Any]) -> TableSettings:
    extra: dict[str, Any] = {"upsert": UPSERT_KEYS} if rule["rule"] == "upsert_compaction" else {}
    if rule["rule"] == "refresh":
        extra["layout"] = LAYOUT
    return load_config({"defaults": {"rules": [rule], **extra}}).for_table("t")


FAMILIES: dict[str, tuple[dict[str, Any], Callable[[int], list[Segment]], datetime]] = {
    "time_layers": ({"rule": "auto_merge", "levels": ["day", "week", "month"]}, hourly_with_daily_gap, NOW),
    "level_thresholds": (
        {"rule": "minor", "level_thresholds": [4, 3]},
        compacted_levels,
        NOW,
    ),
    "size_threshold": ({"rule": "major", "size_threshold": "1GB"}, merged_near_threshold, NOW),
    "bin_packing": ({"rule": "bin_pack", "strategy": "first_fit"}, merged_stream, NOW),
    "upsert_selection": (
        {"rule": "upsert_compaction", "invalid_records_threshold_percent": 30},
        upserted,
        NOW,
    ),
    "refresh": (
        {"rule": "refresh", "skip_index_check": True, "desired_segment_size": "500MB"},
        conforming_hours,
        NOW,
    ),
}
UPSERT_KEYS = {"primary_key": ["id"], "comparison_column": "version"}
LAYOUT = {"time_column": "ts", "bucket_time_period": "1h", "columns": {"ts": {"type": "timestamp"}}}


def next_load(segments: list[Segment]) -> Segment:
    """One more load, as an event brings it: as wide as the newest data, right after it, and
    small (10 MB)."""
    last = max(segments, key=lambda s: s.end)
    loaded = max(s.loaded_at for s in segments) + timedelta(seconds=1)  # the newest load
    span = TimeRange(last.end, last.end + last.range.duration)
    return replace(last, id="new", range=span, loaded_at=loaded, level=0, bytes=10 << 20)


def measure(
    rule: dict[str, Any], segments: list[Segment], now: datetime, repeat: int
) -> tuple[float, int, float]:
    """(best time of a full evaluation, its plans, best time of an attempt after one new load)."""
    cfg = settings(rule)
    table = TableSegments(segments)  # as the catalog holds them
    invalid: dict[str, int] | None = None
    if rule["rule"] == "upsert_compaction":  # counts in the columns, as the key index notes them
        table.note_invalid(invalid_rows(segments), whole=True)
        invalid = {}
    best, plans = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        began = time.perf_counter()
        evaluation = evaluate("t", table.columns(), cfg, now, explain=False, invalid_counts=invalid)
        best = min(best, time.perf_counter() - began)
        plans = len(evaluation.plans)
    if invalid is not None:  # the stream looks near a load only on a settled table: run the plans
        for p in evaluation.plans:
            for sid in p.input_ids:
                del table[sid]
            table[p.output.id] = p.output  # no invalid rows left: the merge dropped them
    fresh = next_load(segments)
    table[fresh.id] = fresh
    after_event = float("inf")
    for _ in range(repeat):
        gc.collect()
        began = time.perf_counter()
        if invalid is not None:
            table.note_invalid({fresh.id: 0})  # the load's count: the index notes what changed
        evaluate("t", table.columns(), cfg, now, explain=False, invalid_counts=invalid, near=(fresh,))
        after_event = min(after_event, time.perf_counter() - began)
    return best, plans, after_event


def upkeep(segments: list[Segment], changes: int = 10_000) -> dict[str, float]:
    """Microseconds per segment to keep the columns: adding `changes` segments to a table of
    len(segments), then removing them (each removal moves the last row into the hole)."""
    table = TableSegments(segments)
    extra = [replace(s, id=f"x{i}") for i, s in enumerate(segments[:changes])]
    began = time.perf_counter()
    for s in extra:
        table[s.id] = s
    added = time.perf_counter() - began
    began = time.perf_counter()
    for s in extra:
        del table[s.id]
    removed = time.perf_counter() - began
    return {"add_us": 1e6 * added / changes, "remove_us": 1e6 * removed / changes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1k and 10k only (CI smoke run)")
    parser.add_argument("--family", choices=sorted(FAMILIES), help="one rule family only")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [10_000, 100_000, 1_000_000]
    rows = []
    at_largest: list[float] = []  # seconds to plan after one event, per family
    growths: list[float] = []
    print(
        f"{'rule family':<18} {'segments':>10} {'plan time s':>12} {'plans':>8} {'growth/10x':>11} "
        f"{'one event ms':>13}"
    )
    for family, (rule, make, now) in FAMILIES.items():
        if args.family and family != args.family:
            continue
        previous: float | None = None
        for n in sizes:
            segments = make(n)
            seconds, plans, after_event = measure(rule, segments, now, repeat=3)
            growth = seconds / previous if previous else None
            previous = seconds
            if n == sizes[-1]:  # the targets judge the largest size
                at_largest.append(after_event)
                growths += [growth] if growth is not None else []
            rows.append(
                {
                    "family": family,
                    "segments": n,
                    "seconds": seconds,
                    "plans": plans,
                    "growth_per_10x": growth,
                    "one_event_seconds": after_event,
                }
            )
            print(
                f"{family:<18} {n:>10,} {seconds:>12.3f} {plans:>8} {(f'{growth:.1f}x' if growth else '-'):>11} "
                f"{1000 * after_event:>13.1f}"
            )
            del segments
    if args.family:
        print("one family: results not saved")
        return
    cost = upkeep(hourly_with_daily_gap(sizes[-1]))
    print(
        f"keeping the columns at {sizes[-1]:,} segments: {cost['add_us']:.1f} us per segment added, "
        f"{cost['remove_us']:.1f} us per segment removed"
    )
    figures = {
        "one_event_ms": 1000 * max(at_largest, default=0.0),
        "growth_per_10x": max(growths) if growths else None,
    }
    verdicts = judge(TARGETS, figures)
    save_results(
        "plan_scale",
        args.quick,
        {"rows": rows, "upkeep": {"segments": sizes[-1], **cost}, "verdicts": verdicts},
    )


if __name__ == "__main__":
    main()

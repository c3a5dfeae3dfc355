"""How fast the operator's console answers for a warehouse of many tables, and how long a batch
may wait for it.

The stream runs as the job runs it, on the test suite's in-memory table store (the console reads
the job's own state, never the tables, for these pages): 10,000 tables, a third of them merged
(three loads and their merge), a third with two loads, a third turned off by an operator before
their loads, so the rows differ. The console (`JobSource`, served by the job's metrics server over HTTP on 127.0.0.1) is then asked
for its pages:

- the warehouse page cold: the first one after a start, which waits at most 0.5 s for the first
  copy of the job's state (256 tables per hold of the handler's lock, every row's status and
  health computed) and otherwise says the copy is being made; and how long after it the page has
  its rows (its first 50, sorted and rendered);
- the warehouse page when that copy is stale: a copy quicker than 0.25 s is made again while the
  page waits, a slower one (a large warehouse) is replaced in the background while the page is
  served from it; the copy's own time, and so how often the console may make one (at most a
  tenth of one core), are printed;
- the same page warm (read again within the 2 s the copy is kept), sorted by another column,
  filtered by name, and its last page; the live fragment a browser polls every 5 s;
- a table's page.

Each figure is the median of `--repeat` requests. The longest
hold of the handler's lock during the copies is the most a micro-batch waits for the console.

Run: .venv/bin/python bench/console_pages.py [--quick]   (quick: 1,000 tables)
Saves bench/results/console_pages[_quick].json.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.report import bench_parser, machine_info, print_table, save_results
from harness.targets import Target, judge

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the in-memory store of tests/helpers

from prometheus_client import CollectorRegistry

from compactor.config.loading import load_config
from compactor.observe.console.app import console_app
from compactor.observe.console.sources import COPY_SHARE, FRESH_FOR_S, JobSource
from compactor.observe.metrics.server import ProbeServer
from compactor.stream.triggers import Trigger
from tests.helpers.harness import Harness

if TYPE_CHECKING:
    from compactor.stream.fair_lock import FairRLock
    from compactor.stream.handler import BatchHandler

TARGETS = (
    Target("warehouse_page_s", "the warehouse page's median, its copy stale", 1.0, unit=" s"),
    Target("first_page_s", "the first warehouse page after a start", 1.0, unit=" s"),
)
CONFIG: dict[str, Any] = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}


class TimedLock:
    """The handler's lock, with each hold timed."""

    def __init__(self, lock: FairRLock) -> None:
        self.lock, self.holds = lock, list[float]()

    def __enter__(self) -> None:
        self.lock.acquire()
        self.at = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.holds.append(time.perf_counter() - self.at)
        self.lock.release()


def build(tables: int, scratch: Path) -> BatchHandler:
    harness = Harness(scratch)
    names = [f"t{i:05d}" for i in range(tables)]
    for name in names:
        harness.store.create(name)
    handler = harness.handler(CONFIG)
    for name in names[2::3]:
        handler._dispatch(Trigger(name, "control", merging=False))
    for start in range(0, tables, 500):  # batches of 500 tables' loads
        chunk = names[start : start + 500]
        loads = [
            harness.day(d, sid=f"{t}d{d}", table=t)
            for t in chunk
            for d in range(2 if t in names[1::3] else 3)
        ]
        handler.process(harness.loaded(*loads))
    return handler


def timed_get(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        answer.read()
        assert answer.status == 200
    return time.perf_counter() - began


def main() -> None:
    parser = bench_parser(__doc__, "1,000 tables")
    parser.add_argument("--tables", type=int, default=None, help="tables (default 10,000; quick 1,000)")
    parser.add_argument("--repeat", type=int, default=5, help="requests per figure (median)")
    args = parser.parse_args()
    tables = args.tables or (1_000 if args.quick else 10_000)
    logging.getLogger("compactor").setLevel(logging.ERROR)  # one line per switched-off table otherwise
    import tempfile

    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        handler = build(tables, Path(scratch))
        built = time.perf_counter() - began
        lock = TimedLock(handler.lock)
        handler.lock = lock  # type: ignore[assignment]  # a timed stand-in for its FairRLock
        cold = JobSource(lambda: [handler], load_config(CONFIG), fresh_for=0.0)
        warm = JobSource(lambda: [handler], load_config(CONFIG), fresh_for=3600.0)
        servers = [
            ProbeServer(CollectorRegistry(), {}, "127.0.0.1", 0, console=console_app(source)).start()
            for source in (cold, warm)
        ]
        cold_url, warm_url = (f"http://127.0.0.1:{s.port}" for s in servers)
        timed_get(warm_url + "/")  # the warm source's one copy
        began = time.perf_counter()
        first = [timed_get(cold_url + "/")]  # the cold source's first page, its copy begun
        while cold._latest is None:  # the rows are on the page once the first copy is done
            time.sleep(0.01)
        rows_after = [time.perf_counter() - began + timed_get(cold_url + "/")]
        stale = [timed_get(cold_url + "/") for _ in range(args.repeat)]
        copy_s = cold._latest.took if cold._latest is not None else float("nan")
        figures = {
            "warehouse page, the first after a start": first,
            "  ... until it has its rows": rows_after,
            "warehouse page, its copy stale": stale,
            "warehouse page, warm": [timed_get(warm_url + "/") for _ in range(args.repeat)],
            "sorted by name, descending": [
                timed_get(warm_url + "/?sort=table&desc=1") for _ in range(args.repeat)
            ],
            "filtered by name": [timed_get(warm_url + "/?q=t0012") for _ in range(args.repeat)],
            "last page": [timed_get(warm_url + f"/?page={tables // 50}") for _ in range(args.repeat)],
            "live fragment (polled)": [timed_get(warm_url + "/fragments/tables") for _ in range(args.repeat)],
            "a table's page": [timed_get(warm_url + "/tables/t00042") for _ in range(args.repeat)],
        }
        for server in servers:
            server.stop()
    rows = [[name, statistics.median(times), max(times)] for name, times in figures.items()]
    print(f"\n{tables:,} tables (stream built in {built:.0f}s)")
    print_table(["page", "median s", "max s"], rows)
    page_median = statistics.median(figures["warehouse page, its copy stale"])
    longest_hold = max(lock.holds) if lock.holds else 0.0
    print(
        f"\nthe copy of the job's state: {copy_s:.2f} s, so at most one every "
        f"{max(FRESH_FOR_S, copy_s / COPY_SHARE):.1f} s (a page is at most that old plus one copy)"
    )
    verdicts = judge(TARGETS, {"warehouse_page_s": page_median, "first_page_s": first[0]})
    print(
        f"longest hold of the job's lock by the console: {1000 * longest_hold:.1f} ms "
        f"(a batch waits at most this long; {len(lock.holds)} holds)"
    )
    save_results(
        "console_pages",
        args.quick,
        {
            "machine": machine_info(),
            "params": {"tables": tables, "repeat": args.repeat},
            "pages": {
                name: {"median_s": statistics.median(t), "max_s": max(t)} for name, t in figures.items()
            },
            "verdicts": verdicts,
            "longest_lock_hold_ms": 1000 * longest_hold,
            "copy_s": copy_s,
        },
    )


if __name__ == "__main__":
    main()

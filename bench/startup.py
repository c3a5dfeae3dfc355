"""Start-up time of the job with a large catalog: how long until it processes events.

Two warehouses, each at two scales (a tenth, then the whole) to show how the
time grows:
- one table with 100,000 live segments in the catalog and 50,000 commits in its Delta log;
- 1,000 tables of 100 segments each, and 10,000 tables of 10 segments each.

Start-up reads the logs of the first 200 known tables (`recovery.EAGER_TABLES`);
the rest are caught up by their first event or attempt, or by the sweep between
batches, so the many-table figure also gives the sweep: seconds of ticks until
every table is caught up, after the first batch.

The catalog store is written as the job leaves it (every segment and each
table's mark saved). The log's commits beyond the first are minimal valid
Delta commits written directly (writing 50,000 real ones through Spark would
take hours); the start-up path never reads them, which is the point: its cost
follows the live segments, not the history. Measured: the recovery that
`build_handler` runs (catalog read, every table's log caught up), then one
batch with one real load event (admission, planning, the catalog saved).

Then `compactor run` itself on 1,000 segments (`harness/restart.py`): from spawn to
an event processed, cold and restarted after a SIGKILL (the same seat, so the
same static name in the lease's group), beside a restart that has to wait out
the dead process's session. The full run makes these starts twice, without the
driver's class archive and with it (`compactor jars --class-archive`, built
first when there is none), each time restarting after a SIGKILL five times, and
judges the median of the second round's five; `--quick` makes them once (one
restart after SIGKILL), with the archive if one is built.

Run: .venv/bin/python bench/startup.py [--quick] [--restarts-only]
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compactor.catalog.store import CatalogChanges, TableMark
from compactor.client.loader import sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.spark_store import SparkTableStore
from compactor.delta.table_ops.writes import write_segment
from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
from compactor.domain.events import SegmentCompleted
from compactor.domain.segments import Segment, TimeRange
from compactor.job.wiring import assemble
from compactor.kafka.settings import KafkaSettings
from compactor.spark.session import build_spark
from compactor.stream.triggers import Envelope
from harness.report import RESULTS, Stopwatch, bench_parser, print_table, save_results
from harness.spark_rows import spark_quiet
from harness.targets import Target, judge

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from compactor.kafka.messages import Message

START = datetime(2020, 1, 1, tzinfo=UTC)
KILLS = 5  # restarts after SIGKILL in a full round, judged on their median
KILLED = "restart after SIGKILL"
# the rules run on every event, but plan nothing: the figure is start-up, not a merge
CONFIG_SOURCE = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [0, 0]}]}}
CONFIG = load_config(CONFIG_SOURCE)
TARGETS = (
    Target("slowest_start_s", "the slowest start-up of the scenarios", 15, unit=" s"),
    Target("start_1000_tables_s", "a start-up beside 1,000 tables", 5, unit=" s"),
    Target(
        "restart_after_kill_s", "restart after SIGKILL to the first event processed", 7, unit=" s"
    ),  # issue 54
)


class NoPublisher:
    """Results and dead letters go nowhere: the figure is the job's own start-up."""

    def send_all(self, messages: Sequence[Message]) -> None:
        return None


def segment(table: str, i: int) -> Segment:
    start = START + timedelta(hours=i)
    return Segment(
        f"s{i:07d}", table, TimeRange(start, start + timedelta(hours=1)), start, records=10, bytes=1000
    )


def real_table(spark: SparkSession, warehouse: str, table: str) -> Segment:
    """A table with one real segment, loaded as a producer loads it."""
    s = Segment("real-0", table, TimeRange(START, START + timedelta(hours=1)), START)
    return write_segment(spark, warehouse, s, sample_rows(spark, START, START + timedelta(hours=1), 10))


def pad_log(warehouse: str, table: str, commits: int) -> None:
    """Minimal valid commits after the first, as a busy table accumulates them."""
    log = Path(table_uri(warehouse, table)) / "_delta_log"
    for v in range(1, commits):
        info = {
            "commitInfo": {
                "timestamp": 1_600_000_000_000 + v,
                "operation": "WRITE",
                "operationParameters": {},
            }
        }
        (log / f"{v:020d}.json").write_text(json.dumps(info) + "\n")


def empty_table(warehouse: str, table: str) -> None:
    """A table's first commit (protocol and schema), written directly."""
    log = Path(table_uri(warehouse, table)) / "_delta_log"
    log.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in (("event_time", "timestamp"), ("customer_id", "integer"), ("segment_id", "string"))
        ],
    }
    actions = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": table,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["segment_id"],
                "configuration": {},
                "createdTime": 1_600_000_000_000,
            }
        },
        {
            "commitInfo": {
                "timestamp": 1_600_000_000_000,
                "operation": "CREATE TABLE",
                "operationParameters": {},
            }
        },
    ]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def build_catalog(
    spark: SparkSession, warehouse: str, tables: dict[str, int], versions: dict[str, int]
) -> None:
    changes = CatalogChanges()
    for table, count in tables.items():
        changes.live |= {(table, s.id): s for s in (segment(table, i) for i in range(count))}
        changes.marks[table] = TableMark(versions[table], announced=versions[table])
    store = DeltaCatalogStore(spark, warehouse)
    store.save(changes)
    store.compact()  # in the table, as a job that ran a while leaves most of it


def measure(spark: SparkSession, warehouse: str, first: Segment) -> dict[str, float]:
    kafka = KafkaSettings("127.0.0.1:1", "segments", "results", "dead")
    codec = default_codec()
    with Stopwatch() as recovery:
        handler = assemble(
            SparkTableStore(spark, warehouse),
            DeltaCatalogStore(spark, warehouse),
            CONFIG,
            kafka,
            NoPublisher(),
            codec,
            lambda: datetime.now(UTC),
        )
    event = Envelope(
        first.table, codec.encode_segment_completed(SegmentCompleted(first, first.loaded_at)), "bench"
    )
    with Stopwatch() as batch:
        handler.process([event])
    assert handler.catalog.get(first.table, first.id) is not None
    for table in handler.catalog.table_names:  # the sweep alone, not the start-up's due attempts
        handler.planner.due.forget(table)
    with Stopwatch() as sweep:
        while len(handler.keeper.unread):
            handler.tick()
    segments = sum(len(handler.catalog.segments(t)) for t in handler.catalog.table_names)
    return {
        "recovery_s": recovery.seconds,
        "first_batch_s": batch.seconds,
        "total_s": recovery.seconds + batch.seconds,
        "segments_loaded": segments,
        "sweep_s": sweep.seconds,
    }


def one_big_table(spark: SparkSession, root: Path, segments: int, commits: int) -> dict[str, Any]:
    warehouse = str(root / f"big-{segments}")
    real = real_table(spark, warehouse, "events")
    pad_log(warehouse, "events", commits)
    build_catalog(spark, warehouse, {"events": segments}, {"events": commits - 1})
    second = Segment("real-1", "events", TimeRange(START - timedelta(hours=1), START), START)
    second = write_segment(
        spark, warehouse, second, sample_rows(spark, START - timedelta(hours=1), START, 10)
    )
    del real
    return {"scenario": "one table", "tables": 1, "segments": segments, "commits": commits} | measure(
        spark, warehouse, second
    )


def many_table_warehouse(spark: SparkSession, warehouse: str, tables: int, per_table: int) -> None:
    """`tables` tables with `per_table` segments each in the catalog; t0000 is a real one."""
    real_table(spark, warehouse, "t0000")
    for t in range(1, tables):
        empty_table(warehouse, f"t{t:04d}")
    versions = {f"t{t:04d}": 0 for t in range(tables)}
    build_catalog(spark, warehouse, {name: per_table for name in versions}, versions)


def many_tables(spark: SparkSession, root: Path, tables: int, per_table: int) -> dict[str, Any]:
    warehouse = str(root / f"many-{tables}")
    many_table_warehouse(spark, warehouse, tables, per_table)
    second = Segment("real-1", "t0000", TimeRange(START - timedelta(hours=1), START), START)
    second = write_segment(
        spark, warehouse, second, sample_rows(spark, START - timedelta(hours=1), START, 10)
    )
    return {
        "scenario": "many tables",
        "tables": tables,
        "segments": tables * per_table,
        "commits": tables,
    } | measure(spark, warehouse, second)


def main() -> None:
    parser = bench_parser(__doc__, "1,000 and 10,000 segments; 20 and 100 tables")
    parser.add_argument("--restarts-only", action="store_true", help="Only the `compactor run` starts.")
    args = parser.parse_args()
    spark = build_spark("bench-startup", master="local[2]")
    spark_quiet(spark)
    root = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    big = [(1_000, 500), (10_000, 5_000)] if args.quick else [(10_000, 5_000), (100_000, 50_000)]
    many = [(20, 10), (100, 10), (1_000, 1)] if args.quick else [(100, 100), (1_000, 100), (10_000, 10)]
    if args.restarts_only:
        big, many = [], []
    rows = []
    try:
        rows += [one_big_table(spark, root, s, c) for s, c in big]
        rows += [many_tables(spark, root, t, p) for t, p in many]
        restarts = restart_rounds(spark, root, args.quick)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(
        ["scenario", "tables", "segments", "commits", "recovery s", "first batch s", "total s", "sweep s"],
        [
            [
                r["scenario"],
                r["tables"],
                r["segments"],
                r["commits"],
                r["recovery_s"],
                r["first_batch_s"],
                r["total_s"],
                r["sweep_s"],
            ]
            for r in rows
        ],
    )
    for name in ("one table", "many tables") if rows else ():
        small, large = [r for r in rows if r["scenario"] == name][:2]  # the same tables, x10 segments
        growth = large["total_s"] / small["total_s"]
        print(f"{name}: x{large['segments'] / small['segments']:.0f} segments -> x{growth:.1f} time")
    if args.restarts_only:  # the tables' figures of the last full run are kept beside the new restarts
        previous = RESULTS / ("startup_quick.json" if args.quick else "startup.json")
        with contextlib.suppress(OSError, ValueError):
            rows = json.loads(previous.read_text()).get("rows", [])
    many_at = {r["tables"]: r["total_s"] for r in rows if r["scenario"] == "many tables"}
    figures = {
        "slowest_start_s": max((r["total_s"] for r in rows), default=None),
        "start_1000_tables_s": many_at.get(1000),
        "restart_after_kill_s": kill_median(restarts),
    }
    verdicts = judge(TARGETS, figures)
    save_results("startup", args.quick, {"rows": rows, "restarts": restarts, "verdicts": verdicts})


def kill_median(restarts: list[dict[str, Any]]) -> float | None:
    """The median restart after SIGKILL of the last round (with the class archive, when built)."""
    if not restarts:
        return None
    last = restarts[-1]["class_archive"]
    kills = [r["processed"] for r in restarts if r["start"] == KILLED and r["class_archive"] == last]
    return round(statistics.median(kills), 2) if kills else None


def restart_rounds(spark: SparkSession, root: Path, quick: bool) -> list[dict[str, Any]]:
    """The restarts without the driver's class archive, then (the full run: built first when there
    is none) with it; `--quick`, one round as the machine is set up (an archive if built)."""
    from compactor.spark import class_archive
    from compactor.spark.session import jars_for

    archive = class_archive.archive_for([str(p) for p in jars_for(())])
    if quick:
        return restart_part(spark, root / "restart", 1_000, archive.is_file(), kills=1)
    rows = restart_part(spark, root / "restart", 1_000, False, KILLS)
    if not archive.is_file():
        print(f"building the driver's class archive: {class_archive.build(jars_for(()))}", flush=True)
    return rows + restart_part(spark, root / "restart-archived", 1_000, True, KILLS)


def restart_part(
    spark: SparkSession, root: Path, segments: int, archive: bool, kills: int
) -> list[dict[str, Any]]:
    """`compactor run` itself, from spawn to an event processed: cold, and restarted after a SIGKILL;
    with the driver's class archive mapped or not (`COMPACTOR_CLASS_ARCHIVE`)."""
    from compactor.spark.class_archive import SWITCH_ENV
    from harness.restart import restart_figures
    from harness.services import kafka_bootstrap

    root.mkdir(parents=True)
    warehouse = str(root / "warehouse")
    many_table_warehouse(spark, warehouse, 10, segments // 10)
    config = root / "config.yaml"
    config.write_text(json.dumps(CONFIG_SOURCE))  # JSON is YAML
    try:
        with kafka_bootstrap(root) as bootstrap:
            env = {**os.environ, SWITCH_ENV: "on" if archive else "off"}
            rows = restart_figures(spark, root, bootstrap, warehouse, config, START, env, kills)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    with_or_not = "with" if archive else "without"
    print(
        f"\n`compactor run`, 10 tables and {segments} segments, {with_or_not} the class archive: seconds from spawn to"
    )
    print_table(
        ["start", "lease + Spark up", "layout checked", "query started", "event processed", "its batch"],
        [
            [
                r["start"],
                r.get("spark"),
                r.get("layout"),
                r.get("started"),
                r["processed"],
                r["phases"]["batch"],
            ]
            for r in rows
        ],
    )
    print("the first batch's phases (s):", {k: round(v, 3) for k, v in rows[0]["phases"].items()})
    return [r | {"segments": segments, "class_archive": archive} for r in rows]


if __name__ == "__main__":
    main()

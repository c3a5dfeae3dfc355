"""`compactor demo`: the whole system on one machine, narrated.

Starts a local broker when no Kafka is configured, creates a sample table, runs
the streaming job in this process, loads daily segments one by one, and prints
each merge as its `MergeResult` arrives, then the final layout and row counts.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from compactor.client.loader import load_segment, sample_rows
from compactor.codec.events import default_codec
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.kafka.settings import KafkaSettings

TABLE = "demo_sales"
FIRST_DAY = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday, so weeks line up visibly


def _watch_results(
    kafka: KafkaSettings, echo: Callable[[str], None], stop: threading.Event
) -> threading.Thread:
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"demo-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([kafka.results_topic])
    codec = default_codec()

    def run() -> None:
        try:
            while not stop.is_set():
                msg = consumer.poll(0.5)
                value = None if msg is None or msg.error() else msg.value()
                if value is None:
                    continue
                r = codec.decode_merge_result(value)
                out = r["output"]
                echo(
                    f"  MERGED by {r['rule']} ({r['level'] or r['pool'] or '-'}): {len(r['inputs'])} segments "
                    f"{r['inputs'][0]} .. {r['inputs'][-1]} -> {out['segment_id']} "
                    f"[{out['start']:%Y-%m-%d}, {out['end']:%Y-%m-%d}) {r['records_out']} rows, "
                    f"{r['status']} at version {r['table_version']}"
                )
        finally:
            consumer.close()

    thread = threading.Thread(target=run, name="demo-results", daemon=True)
    thread.start()
    return thread


def run_demo(workdir: Path, days: int, rows: int, bootstrap: str | None, echo: Callable[[str], None]) -> int:
    """Load `days` daily segments into a sample table and print each merge as it commits."""
    from compactor.dev.kafka_broker import LocalKafkaBroker
    from compactor.job.query import start_query
    from compactor.job.wiring import build_handler
    from compactor.kafka.producer import EventProducer
    from compactor.spark.session import build_spark

    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    with ExitStack() as stack:  # callbacks run last-in first-out: clients close before the broker stops
        if not bootstrap:
            echo("starting a local Kafka broker (KRaft) from Apache Kafka's jars ...")
            broker = LocalKafkaBroker(workdir / "kafka")
            bootstrap = broker.start()
            stack.callback(broker.stop)
        echo(f"Kafka at {bootstrap}")
        kafka = KafkaSettings(bootstrap)
        echo("starting Spark with Delta Lake ...")
        spark = build_spark("compactor-demo")
        spark.sparkContext.setLogLevel("ERROR")
        config = load_config({"defaults": {"rules": [{"rule": "auto_merge", "levels": ["week", "month"]}]}})
        warehouse = workdir / "warehouse"
        job_producer = EventProducer(kafka)
        stack.callback(job_producer.close)
        handler = build_handler(spark, config, warehouse, kafka, job_producer)
        query = start_query(spark, handler, kafka, workdir / "checkpoint")
        stack.callback(query.stop)
        stop = threading.Event()
        watcher = _watch_results(kafka, echo, stop)
        stack.callback(watcher.join, 5)
        stack.callback(stop.set)

        echo(f"table {TABLE}: time-layer auto-merge with levels [week, month]; loading {days} daily segments")
        producer = EventProducer(kafka)
        stack.callback(producer.close)
        loaded = _load_days(spark, warehouse, kafka, producer, days, rows, echo)
        _wait_for_quiet(handler, query, timeout=300)
        time.sleep(1.5)  # let the watcher print the last result
        return _report(spark, warehouse, handler, loaded, echo)
    return 0


def _load_days(
    spark: Any,
    warehouse: Path,
    kafka: KafkaSettings,
    producer: Any,
    days: int,
    rows: int,
    echo: Callable[[str], None],
) -> int:
    loaded = 0
    for i in range(days):
        start = FIRST_DAY + timedelta(days=i)
        segment = load_segment(
            spark,
            warehouse,
            kafka,
            producer,
            TABLE,
            sample_rows(spark, start, start + timedelta(days=1), rows, seed=i),
            start,
            start + timedelta(days=1),
            segment_id=f"d{start:%Y%m%d}",
        )
        loaded += segment.records
        echo(f"loaded {segment.id} [{start:%Y-%m-%d %a}] {segment.records} rows")
    return loaded


def _report(spark: Any, warehouse: Path, handler: Any, loaded: int, echo: Callable[[str], None]) -> int:
    """The final segment layout and the conservation check; 1 if rows changed."""
    path = table_uri(warehouse, TABLE)
    counts = spark.read.format("delta").load(path).groupBy("segment_id").count().collect()
    by_id = {r["segment_id"]: r["count"] for r in counts}
    echo("\nfinal segment layout:")
    echo(f"  {'segment':<28} {'start':<11} {'end (excl.)':<11} {'rows':>7}")
    for s in sorted(handler.catalog.segments(TABLE), key=lambda s: s.start):
        echo(f"  {s.id:<28} {s.start:%Y-%m-%d}  {s.end:%Y-%m-%d}  {by_id.get(s.id, 0):>7}")
    total = sum(by_id.values())
    echo(f"\nrows loaded: {loaded}; rows in the table now: {total}; merges committed: {handler.stats.merges}")
    if total != loaded:
        echo("ERROR: row count changed")
        return 1
    echo("row count unchanged: every merge replaced its inputs atomically")
    return 0


def _wait_for_quiet(handler: object, query: Any, timeout: float) -> None:
    """Wait until the job has seen no new event for a few seconds, and neither a batch nor a
    merge is running (merges run beside the batches, and one may take longer than that on a
    busy machine; stopping the query would cut it)."""
    merges = handler.merges  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        events = handler.stats.events  # type: ignore[attr-defined]  # read anew: a snapshot
        if events != last or query.status["isTriggerActive"] or merges.running():
            last, quiet_since = events, time.monotonic()
        elif time.monotonic() - quiet_since > 6:
            return
        time.sleep(0.5)

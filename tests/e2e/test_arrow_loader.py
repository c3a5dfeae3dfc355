"""Loads without a JVM (delta-rs), merged by the job like any load, on real Kafka, Spark and Delta."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compactor.client.spark_loader import SparkLoader
from compactor.delta.spark_store import SparkTableStore
from compactor.domain.segment_json import segment_to_dict
from compactor.kafka.topics import ensure_topics
from tests.helpers.sales import TABLE, handler_for, read_table
from tests.helpers.streaming import JobRunner, checksum, make_kafka

pytestmark = pytest.mark.integration

JAN = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday

# run in a fresh interpreter: pandas rows loaded day by day, the last one twice (a retry)
LOAD_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from datetime import datetime, timedelta, timezone
    import pandas as pd
    from compactor import ArrowLoader

    warehouse, servers, topic = sys.argv[1:4]
    first = datetime(2024, 1, 1, tzinfo=timezone.utc)
    loaded = []
    with ArrowLoader(warehouse, servers, segments_topic=topic) as loader:
        for day in range(6):
            start = first + timedelta(days=day)
            rows = pd.DataFrame({
                "event_time": pd.date_range(start, periods=10, freq="2h"),
                "customer_id": [day * 100 + i for i in range(10)],
                "amount": [float(i) for i in range(10)],
            })
            end = start + timedelta(days=1)
            loaded.append(loader.load("sales", rows, start, end, segment_id=f"d{start:%Y%m%d}").id)
        again = loader.load("sales", rows, start, end, segment_id=loaded[-1])
    def stat(pid):  # a process may end between the listing and the read
        try:
            return open(f"/proc/{pid}/stat").read()
        except OSError:
            return None
    stats = [s for s in map(stat, (p for p in os.listdir("/proc") if p.isdigit())) if s]
    children = [s.split(") ")[0].split(" (")[1] for s in stats if int(s.split(") ")[1].split()[1]) == os.getpid()]
    print(json.dumps({"loaded": loaded, "again": again.id, "records": again.records,
                      "spark": "pyspark" in sys.modules, "children": children}))
    """
)


def run_loader(warehouse: Path, servers: str, topic: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, str(warehouse), servers, topic],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_delta_rs_loads_without_a_jvm_are_merged_like_any_load(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    loaded = run_loader(warehouse, kafka_bootstrap, kafka.segments_topic)
    assert loaded["spark"] is False, "the loader never imported Spark"
    assert "java" not in loaded["children"], loaded["children"]
    assert loaded["again"] == loaded["loaded"][-1] and loaded["records"] == 10, (
        "a retry announces the first load"
    )

    # the seventh day through the Spark loader: the same record in the same place
    with SparkLoader(spark, warehouse, kafka_bootstrap, segments_topic=kafka.segments_topic) as loader:
        sunday = JAN + timedelta(days=6)
        rows = spark.createDataFrame(
            [(sunday + timedelta(hours=2 * i), 600 + i, float(i)) for i in range(10)],
            "event_time timestamp, customer_id bigint, amount double",
        )
        loader.load(TABLE, rows, sunday, sunday + timedelta(days=1), segment_id="d20240107")
    store = SparkTableStore(spark, warehouse)
    changes = store.changes_since(TABLE, -1)
    assert changes.foreign == [], "delta-rs loads are the compactor's own commits, not others'"
    records = {r.added[0].id: r for r in changes.records}
    assert len(records) == 7 and {r.op for r in records.values()} == {"load"}
    rust, spark_load = records["d20240101"].added[0], records["d20240107"].added[0]
    keys = set(segment_to_dict(rust)) - {"id", "start", "end", "loaded_at", "records", "bytes"}
    assert {k: segment_to_dict(rust)[k] for k in keys} == {k: segment_to_dict(spark_load)[k] for k in keys}
    before = checksum(read_table(spark, warehouse))
    assert before[0] == 70

    handler = handler_for(spark, warehouse, kafka, ["week"])
    with caplog.at_level("INFO", logger="compactor"):
        JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()
    assert "written by others" not in caplog.text
    assert (handler.stats.merges, handler.stats.dead_letters) == (1, 0)
    (merged,) = handler.catalog.segments(TABLE)
    assert merged.records == 70
    assert checksum(read_table(spark, warehouse)) == before

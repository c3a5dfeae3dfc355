"""The key index over a real Delta table counts exactly what the full Spark scan counts: ties in
the comparison value, values missing, a composite key, new loads read alone, a real upsert
merge followed without a read, and another writer's delete read again where it happened."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.catalog.key_index import KeyIndex
from compactor.config.loading import load_config
from compactor.delta.paths import table_uri
from compactor.delta.rewrite.upsert import invalid_counts
from compactor.delta.spark_store import SparkTableStore
from compactor.delta.table_ops.writes import write_segment
from compactor.domain.plans import make_plan
from compactor.domain.segments import Segment, TimeRange

pytestmark = pytest.mark.integration

TABLE = "accounts"
START = datetime(2024, 6, 1, tzinfo=UTC)
SETTINGS = load_config(
    {"tables": {TABLE: {"upsert": {"primary_key": ["region", "account"], "comparison_column": "version"},
                        "rules": [{"rule": "upsert_compaction"}]}}}
).for_table(TABLE)  # fmt: skip


def load(spark: Any, warehouse: Path, n: int, version: Any) -> Segment:
    """Load n: accounts 4n..4n+11 of regions a and b (so each load overlaps the one before),
    all at `version` (a column: some rows have none)."""
    rows = spark.range(24).select(
        F.when(F.col("id") % 2 == 0, "a").otherwise("b").alias("region"),
        (F.col("id") / 2 + 4 * n).cast("int").alias("account"),
        version.cast("long").alias("version"),
        F.lit(f"load {n}").alias("note"),
    )
    start = START + timedelta(hours=n)
    segment = Segment(f"u{n}", TABLE, TimeRange(start, start + timedelta(hours=1)), loaded_at=start)
    return write_segment(spark, warehouse, segment, rows)


def test_the_key_index_counts_what_the_full_scan_counts(spark: Any, warehouse: Path) -> None:
    store, upsert = SparkTableStore(spark, warehouse), SETTINGS.upsert
    assert upsert is not None
    versions = [F.lit(1), F.lit(1), F.when(F.col("id") % 3 == 0, None).otherwise(F.lit(2)), F.lit(0)]
    segments = {s.id: s for s in (load(spark, warehouse, n, v) for n, v in enumerate(versions[:3]))}
    index = KeyIndex()
    index.absorb(segments.values(), store.key_rows(TABLE, upsert, None))
    order = {sid: s.loaded_at for sid, s in segments.items()}
    expected = invalid_counts(spark, warehouse, TABLE, upsert, order)
    # u1 ties u0 on accounts 4-11 and wins (later); u2 beats u1 on 10 of their 16 shared keys and
    # loses the other 6, where its version is missing
    assert index.invalid() == expected == {"u0": 16, "u1": 10, "u2": 6}

    late = load(spark, warehouse, 3, versions[3])  # version 0: loses to every row it meets but nulls
    segments[late.id], order[late.id] = late, late.loaded_at
    assert index.follow(segments, lambda sid: None).loads == ["u3"]
    index.absorb([late], store.key_rows(TABLE, upsert, ["u3"]))
    before = invalid_counts(spark, warehouse, TABLE, upsert, order)
    assert index.invalid() == before

    plan = make_plan(TABLE, "upsert_compaction", [segments["u1"], segments["u2"]], allow_single=True)
    commit = store.commit(plan, SETTINGS, order)
    (output,) = commit.outputs
    live = {"u0": segments["u0"], "u3": late, output.id: output}
    followed = index.follow(live, {"u1": plan.plan_id, "u2": plan.plan_id}.get)
    assert followed.loads == [] and not followed.unfollowed, "followed, nothing read"
    order = {sid: s.loaded_at for sid, s in live.items()}
    assert index.invalid() == invalid_counts(spark, warehouse, TABLE, upsert, order)
    assert output.records == 48 - before["u1"] - before["u2"], "the merge kept the valid rows"


def test_another_writers_delete_is_read_again_only_where_it_happened(spark: Any, warehouse: Path) -> None:
    """Another writer deletes one segment's rows and some of another's in place: the index
    reads the shrunk segment and the other rows of the keys both held, and counts what the
    full scan counts."""
    store, upsert = SparkTableStore(spark, warehouse), SETTINGS.upsert
    assert upsert is not None
    segments = {s.id: s for s in (load(spark, warehouse, n, F.lit(n)) for n in range(3))}
    index = KeyIndex()
    index.absorb(segments.values(), store.key_rows(TABLE, upsert, None))
    # the later load wins each shared account: u0 keeps 0-3, u1 4-7, u2 8-19 (in both regions)
    assert index.invalid() == {"u0": 24 - 8, "u1": 24 - 8}

    table = DeltaTable.forPath(spark, table_uri(warehouse, TABLE))
    table.delete("segment_id = 'u1' OR (segment_id = 'u2' AND region = 'a')")
    assert store.row_counts(TABLE)["u2"].visible == 12
    live = {"u0": segments["u0"], "u2": replace(segments["u2"], records=12)}
    followed = index.follow(live, lambda sid: None)
    assert followed.unfollowed == ["u1", "u2"] and followed.loads == ["u2"]
    assert len(followed.orphans) == 8 + 24, "the keys u1 and u2 won"
    index.absorb([live["u2"]], store.key_rows(TABLE, upsert, ["u2"]))
    index.retake(store.key_rows_of_keys(TABLE, upsert, followed.orphans, ["u2"]))
    order = {sid: s.loaded_at for sid, s in live.items()}
    # region a: u0 wins accounts 0-11 again; region b: u0 0-7, u2 8-19, so u0 loses 8-11 of b
    assert index.invalid() == invalid_counts(spark, warehouse, TABLE, upsert, order) == {"u0": 4}
    assert len(index) == 12 + 20

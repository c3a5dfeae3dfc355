"""The catalog store on Delta: saved changes fold latest-wins, retired segments are found by id,
and the part read at start-up is rewritten to its live rows once tombstones outnumber them."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable as RustDeltaTable
from pyspark.sql import functions as F

from compactor.catalog.failures import Failure
from compactor.catalog.retired import RetiredFilter, RetiredSegment
from compactor.catalog.store import CatalogChanges, TableMark
from compactor.delta.files import HadoopFiles
from compactor.delta.warehouse import catalog_table
from compactor.delta.warehouse.catalog_table import DeltaCatalogStore
from tests.helpers.segments import seg

pytestmark = pytest.mark.integration

AT = datetime(2024, 3, 1, 12, tzinfo=UTC)
FAILED = Failure("plan-9", "minor", "RuntimeError: disk full", AT, AT + timedelta(minutes=5))


def test_saved_changes_come_back_folded_and_retired_segments_are_found_by_id(
    spark: Any, warehouse: Path
) -> None:
    store = DeltaCatalogStore(spark, warehouse)
    assert store.load().segments == {} and store.retired("t", ["a"]) == {}
    a, b, c = (seg(i, f"2024-01-0{n}", table="t", records=n) for n, i in enumerate("abc", start=1))
    kept = RetiredFilter()
    kept.add("a")
    store.save(
        CatalogChanges(
            live={("t", "a"): a, ("t", "b"): b},
            marks={
                "t": TableMark(3),
                "u": TableMark(1, merging=False, failures=(FAILED,), debt='{"stuck": true}'),
            },
        )
    )
    store.save(
        CatalogChanges(
            live={("t", "a"): None, ("t", "c"): c, ("t", "b"): replace(b, records=20)},
            retired=[RetiredSegment.of(a, "plan-1")],
            marks={"t": TableMark(5, announced=2, retired=kept, unannounced=(3, 5))},
        )
    )
    loaded = DeltaCatalogStore(spark, warehouse).load()  # a new process
    assert sorted((s.id, s.records) for s in loaded.segments["t"]) == [("b", 20), ("c", 3)]
    mark = loaded.marks["t"]
    assert (mark.version, mark.announced, mark.retired.might_contain("a")) == (5, 2, True)
    assert (mark.unannounced, loaded.marks["u"].unannounced) == ((3, 5), ()), "and the unannounced merges"
    assert mark.merging and not loaded.marks["u"].merging, "the merging switch is kept with the mark"
    assert (mark.failures, loaded.marks["u"].failures) == ((), (FAILED,)), "and the failures"
    assert (mark.debt, loaded.marks["u"].debt) == (None, '{"stuck": true}'), "and the debt outlook"
    # a mark row written before the debt outlook held a bare list of failures
    assert catalog_table._mark_extras(json.dumps([FAILED.to_dict()])) == {
        "failures": (FAILED,),
        "debt": None,
        "quarantine": None,
        "unannounced": (),
    }
    (found,) = store.retired("t", ["a", "b"]).values()
    assert found == RetiredSegment.of(a, "plan-1") and found.same_event(a)
    assert store.merged_by("t", ["plan-1"]) == {"plan-1": {"a"}} and store.merged_by("u", ["plan-1"]) == {}


def test_the_start_up_part_is_rewritten_to_its_live_rows(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DeltaCatalogStore(spark, warehouse)
    for i in range(6):  # each segment added, then dropped: tombstones pile up
        s = seg(f"s{i}", "2024-01-01", table="t")
        store.save(CatalogChanges(live={("t", s.id): s}))
        store.save(CatalogChanges(live={("t", s.id): None}))
    store.save(CatalogChanges(live={("t", "keep"): seg("keep", "2024-01-02", table="t")}))
    store.compact()  # the journal into the table
    rows = spark.read.format("delta").load(store.uri).where(F.col("part") == "current")
    assert rows.count() == 13
    monkeypatch.setattr(catalog_table, "REWRITE_SLACK", 0)
    assert [s.id for s in DeltaCatalogStore(spark, warehouse).load().segments["t"]] == ["keep"]
    assert rows.count() == 1, "rewritten to the live row"


def test_saves_go_to_a_journal_that_is_folded_into_the_table_at_intervals(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog_table, "COMPACT_EVERY", 3)
    store = DeltaCatalogStore(spark, warehouse)
    a, b = seg("a", "2024-01-01", table="t"), seg("b", "2024-01-02", table="t")
    kept = RetiredFilter()
    kept.add("a")
    store.save(CatalogChanges(live={("t", "a"): a}, marks={"t": TableMark(1, retired=kept)}))
    store.save(CatalogChanges(live={("t", "a"): None, ("t", "b"): b}, retired=[RetiredSegment.of(a, "p1")]))
    journal = Path(store.journal_uri.removeprefix("file:"))

    def files() -> list[str]:
        return sorted(p.name for p in journal.iterdir() if p.suffix == ".json")

    assert files() == [f"{n:020d}.json" for n in (1, 2)]
    assert not (warehouse / "_compactor" / "catalog").exists(), "no Spark job, no Delta commit yet"

    reader = DeltaCatalogStore(spark, warehouse, writer=False)  # `compactor status` while the job runs
    assert [s.id for s in reader.load().segments["t"]] == ["b"] and reader.load().marks["t"].version == 1
    assert reader.load().marks["t"].retired.might_contain("a"), (
        "the mark's filter comes back from the journal"
    )
    assert reader.retired("t", ["a"])["a"].retired_by == "p1", "retired rows are found in the journal too"
    assert reader.merged_by("t", ["p1", "p9"]) == {"p1": {"a"}}, "and by the plan that merged them"
    assert len(files()) == 2, "a reader leaves the journal alone"

    store.save(CatalogChanges(marks={"t": TableMark(2)}))  # the third save folds the journal in, aside
    assert store._compacting is not None and store._compacting.name == "catalog-compaction"
    store.compact()  # waits for the fold running aside; nothing is left to fold after it
    assert files() == []
    table = spark.read.format("delta").load(store.uri)
    assert table.count() == 6 and table.select("seq").distinct().count() == 3
    again = DeltaCatalogStore(spark, warehouse).load()
    assert [s.id for s in again.segments["t"]] == ["b"] and again.marks["t"].version == 2

    # a crash between the append and the deletes leaves rows in both: they fold once
    store.save(CatalogChanges(marks={"t": TableMark(3)}))
    store._append(store._journal)
    restarted = DeltaCatalogStore(spark, warehouse)
    assert restarted.load().marks["t"].version == 3
    assert files() == [f"{4:020d}.json"], "start-up leaves the journal for the next compaction"
    assert restarted.retired("t", ["a"])["a"].retired_by == "p1"
    assert restarted.merged_by("t", ["p1"]) == {"p1": {"a"}}, "found in both, told once"
    restarted.compact()  # the row appended twice now: it still folds once
    assert files() == [] and DeltaCatalogStore(spark, warehouse).load().marks["t"].version == 3


def test_saves_go_on_while_the_journal_is_folded_aside(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog_table, "COMPACT_EVERY", 2)
    store = DeltaCatalogStore(spark, warehouse)
    entered, release = threading.Event(), threading.Event()
    append = store._append

    def slow_append(rows: list[Any]) -> None:
        entered.set()
        assert release.wait(30)
        append(rows)

    monkeypatch.setattr(store, "_append", slow_append)
    journal = Path(store.journal_uri.removeprefix("file:"))
    store.save(CatalogChanges(marks={"t": TableMark(1)}))
    store.save(CatalogChanges(marks={"t": TableMark(2)}))  # due: the fold starts aside, and waits
    assert entered.wait(30)
    store.save(CatalogChanges(marks={"t": TableMark(3)}))  # not held behind the fold
    assert len(list(journal.glob("*.json"))) == 3
    release.set()
    store.compact()
    assert DeltaCatalogStore(spark, warehouse).load().marks["t"].version == 3
    assert list(journal.glob("*.json")) == [], "the save made during the fold was folded after it"


def test_start_up_reads_the_catalog_without_spark_where_delta_rs_can_and_both_agree(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DeltaCatalogStore(spark, warehouse)
    a, b = seg("a", "2024-01-01", table="t"), seg("b", "2024-01-02", table="t")
    kept = RetiredFilter()
    kept.add("x")
    store.save(
        CatalogChanges(live={("t", "a"): a, ("t", "b"): b}, marks={"t": TableMark(4, 3, retired=kept)})
    )
    store.save(CatalogChanges(live={("t", "a"): None}))
    store.compact()
    reads: list[str] = []
    to_arrow = RustDeltaTable.to_pyarrow_table

    def counted(self: RustDeltaTable, *args: Any, **kwargs: Any) -> Any:
        reads.append("delta-rs")
        return to_arrow(self, *args, **kwargs)

    monkeypatch.setattr(RustDeltaTable, "to_pyarrow_table", counted)
    by_rust = DeltaCatalogStore(spark, warehouse).load()
    assert reads == ["delta-rs"]

    spark.sql(f"ALTER TABLE delta.`{store.uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    guarded = DeltaCatalogStore(spark, warehouse).load()  # a reader feature: Spark reads it
    monkeypatch.setattr(HadoopFiles, "local_path", lambda self, uri: None)  # as on an object store
    by_spark = DeltaCatalogStore(spark, warehouse).load()
    assert reads == ["delta-rs"], "neither went through delta-rs"
    for loaded in (by_rust, guarded, by_spark):
        assert loaded.segments == {"t": [b]}
        assert (loaded.marks["t"].version, loaded.marks["t"].announced) == (4, 3)
        assert loaded.marks["t"].retired.might_contain("x")


def test_the_upkeep_bin_packs_the_tables_small_files_and_keeps_every_row(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each journal fold appends a small file; years of them would leave the catalog table as
    many files as folds. The upkeep bin-packs them (and vacuums what no version needs)."""
    monkeypatch.setattr(catalog_table, "COMPACT_EVERY", 1)
    store = DeltaCatalogStore(spark, warehouse)
    for n in range(6):
        segment = seg(f"s{n}", f"2024-01-0{n + 1}", table="t", records=n + 1)
        store.save(CatalogChanges(live={("t", segment.id): segment}, marks={"t": TableMark(n)}))
        store.compact()
    before = RustDeltaTable(store.uri).file_uris()
    store.upkeep()
    assert RustDeltaTable(store.uri).file_uris() == before, "not due yet: nothing done"
    store.upkeep(force=True)
    after = RustDeltaTable(store.uri).file_uris()
    assert len(before) >= 6 and len(after) == 1, "one file for the current partition"
    loaded = DeltaCatalogStore(spark, warehouse).load()
    assert sorted((s.id, s.records) for s in loaded.segments["t"]) == [(f"s{n}", n + 1) for n in range(6)]

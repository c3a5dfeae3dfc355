"""A table's live files, folded from its checkpoint and commits, are the files Delta's own snapshot
holds (pure folds first, then real tables through checkpoints, deletion vectors, column mapping);
the checksums the job writes are the ones Delta computes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from compactor.delta.commit.checksum_file import derive
from compactor.delta.files import HadoopFiles
from compactor.delta.log.live_files import (
    TXNS_KEPT,
    LiveFile,
    LiveFileIndex,
    LiveFiles,
    _as_json_action,
)
from compactor.delta.log.reader import DeltaLogReader
from compactor.delta.paths import table_uri
from tests.delta.test_direct_commit import rust_load, snapshot


def add(path: str, segment: str, rows: int = 10, size: int = 100, **extra: Any) -> dict[str, Any]:
    stats = json.dumps({"numRecords": rows})
    return {
        "add": {
            "path": path,
            "partitionValues": {"segment_id": segment},
            "size": size,
            "stats": stats,
            **extra,
        }
    }


def remove(path: str) -> dict[str, Any]:
    return {"remove": {"path": path, "dataChange": True}}


def test_a_commit_s_removes_apply_before_its_adds_and_a_readd_moves_a_file() -> None:
    live = LiveFiles("/w/t", -1)
    live.fold(0, [add("segment_id=a/1.parquet", "a"), add("segment_id=b/2.parquet", "b")])
    # a deletion vector replaced: the remove and the add of one path in one commit leave the add
    dv = {"storageType": "u", "pathOrInlineDv": "x", "sizeInBytes": 1, "cardinality": 3}
    live.fold(1, [add("segment_id=a/1.parquet", "a", deletionVector=dv), remove("segment_id=a/1.parquet")])
    assert [(f.path, f.hidden, f.vector) for f in live.of(["a"])["a"]] == [
        ("segment_id=a/1.parquet", 3, True)
    ]
    # a promotion re-adds b's file under segment m: b is gone, m holds it
    live.fold(2, [add("segment_id=b/2.parquet", "m")])
    assert set(live.of(["a", "b", "m"])) == {"a", "m"}
    # an absolute path names the same file as the relative one, %-escapes decoded
    live.fold(3, [remove("/w/t/segment_id=a/1.parquet")])
    assert live.segments() == {"m"}
    live.fold(
        4, [add("segment_id=c%3A1/3.parquet", "c:1"), {"txn": {"appId": "compactor-plan-x", "version": 1}}]
    )
    live.fold(5, [remove("segment_id=c:1/3.parquet")])
    assert live.segments() == {"m"} and live.legacy_app_ids == {"compactor-plan-x"}
    with pytest.raises(ValueError, match="fold of version 7 after 5"):
        live.fold(7, [])


def test_transactions_are_kept_while_a_checksum_may_list_them_and_then_not_at_all() -> None:
    live = LiveFiles("/w/t", -1)
    # one application committing again and again holds one entry, its newest
    for version in range(3 * TXNS_KEPT):
        live.fold(version, [{"txn": {"appId": "sink", "version": version}}])
    assert live.txns == {"sink": {"appId": "sink", "version": 3 * TXNS_KEPT - 1}}
    # a loader's id per load: kept up to the bound, then dropped (none expires without a retention)
    base = live.version + 1
    for n in range(TXNS_KEPT - 1):
        live.fold(base + n, [{"txn": {"appId": f"load-{n}", "version": 0}}])
    assert live.txns is not None and len(live.txns) == TXNS_KEPT
    live.fold(live.version + 1, [{"txn": {"appId": "sink", "version": 0}}])
    assert live.txns is not None and live.txns["sink"]["version"] == 0, "a known application updates"
    live.fold(live.version + 1, [{"txn": {"appId": "load-last", "version": 0}}])
    assert live.txns is None
    live.fold(live.version + 1, [{"txn": {"appId": "sink", "version": 1}}])
    assert live.txns is None, "once past the bound, for good"


def test_a_checkpoint_s_structs_read_as_the_commit_files_write_them() -> None:
    arrow = {
        "path": "p",
        "partitionValues": [("segment_id", "a")],
        "size": 5,
        "tags": [],
        "stats": None,
        "stats_parsed": {"numRecords": 7},
        "deletionVector": None,
        "format": {"provider": "parquet", "options": []},
    }
    assert _as_json_action(arrow) == {
        "path": "p",
        "partitionValues": {"segment_id": "a"},
        "size": 5,
        "tags": {},
        "format": {"provider": "parquet", "options": {}},
        "stats": '{"numRecords": 7}',
    }
    file = LiveFile.of(_as_json_action(arrow))
    assert file is not None and (file.segment, file.records, file.visible) == ("a", 7, 7)


def test_a_derived_checksum_counts_new_and_removed_files_and_their_sizes_in_the_histogram() -> None:
    previous = {
        "txnId": "old",
        "tableSizeBytes": 1000,
        "numFiles": 3,
        "numMetadata": 1,
        "numProtocol": 1,
        "metadata": {"configuration": {}},
        "protocol": {},
        "allFiles": [],
        "fileSizeHistogram": {"sortedBinBoundaries": [0, 100, 1000], "fileCounts": [1, 2, 0], "totalBytes": [50, 950, 0]},
        "numDeletionVectorsOpt": 1,
        "numDeletedRecordsOpt": 4,
    }  # fmt: skip
    removed = LiveFile.of(add("x", "a", size=450, deletionVector={"cardinality": 4})["add"])
    assert removed is not None
    derived = derive(previous, [{"size": 1200}], [removed])
    assert (derived["numFiles"], derived["tableSizeBytes"]) == (3, 1750)
    assert derived["fileSizeHistogram"]["fileCounts"] == [1, 1, 1]
    assert derived["fileSizeHistogram"]["totalBytes"] == [50, 500, 1200]
    assert (derived["numDeletionVectorsOpt"], derived["numDeletedRecordsOpt"]) == (0, 0)
    assert "allFiles" not in derived and "txnId" not in derived


@pytest.mark.integration
def test_live_files_from_a_checkpoint_are_delta_s_own(spark: Any, warehouse: Path) -> None:
    """Past a checkpoint, with deletion vectors, a rename under column mapping and a merge: the
    files a fresh index reads are the ones Delta's snapshot lists, and the checksum the job wrote
    for a delta-rs version validates against Delta's recomputation."""
    from compactor.delta.rewrite.merge import execute_merge
    from compactor.domain.plans import make_plan

    segments = [rust_load(warehouse, f"s{i}", i) for i in range(12)]
    path = table_uri(warehouse, "t")
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
        "'delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '3', 'delta.minWriterVersion' = '7')"
    )
    DeltaTable.forPath(spark, path).delete("segment_id = 's3' AND k % 3 = 0")
    execute_merge(spark, warehouse, make_plan("t", "minor", segments[:2]))
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).checkpoint()
    assert (warehouse / "t" / "_delta_log" / "_last_checkpoint").exists()
    DeltaTable.forPath(spark, path).delete("segment_id = 's5' AND k % 2 = 0")

    log = DeltaLogReader(HadoopFiles(spark), path, "t")
    live = LiveFileIndex(log, log.files).at(log.latest_version())
    state = snapshot(spark, warehouse)
    theirs = {(str(f.path()), f.deletionVector() is not None) for f in state.allFiles().collectAsList()}
    assert {(f.path, f.vector) for f in live.everything()} == theirs
    assert sum(f.visible or 0 for f in live.everything()) == spark.read.format("delta").load(path).count()
    assert live.protocol is not None and "columnMapping" in live.protocol["writerFeatures"]
    assert bool(state.validateChecksum(spark._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({})))

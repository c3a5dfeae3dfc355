"""A merge's output written as one partition (`partition_write`) is the file Delta's `writeFiles`
writes: the same rows in the same order, Delta statistics, Parquet footer and schema, in the
partition's directory with the partition's value in its `add`, and the same write metrics; the
tables where skipping `writeFiles` would change a file keep it."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from compactor.config.sort import SortConfig
from compactor.delta.commit import partition_write, transaction
from compactor.delta.commit.partition_write import DATA_SUBDIR, WRITE_ONE_PARTITION, refusal
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.rewrite.merge import execute_merge
from compactor.delta.rewrite.merge_settings import MergeSettings
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.plans import make_plan
from compactor.spark import hash_counter
from tests.delta.test_driver_merge import footer_facts, load

PLAIN_PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
SCHEMA = {"type": "struct", "fields": [{"name": "k", "type": "long", "nullable": True, "metadata": {}}]}
METADATA = {"partitionColumns": [SEGMENT_COLUMN], "configuration": {}, "schemaString": json.dumps(SCHEMA)}


def _written(warehouse: Path, table: str, version: int) -> list[dict[str, Any]]:
    log = warehouse / table / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line)["add"] for line in log.read_text().splitlines() if '"add"' in line]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("order", "files"),
    [(None, 1), (None, 3), (SortConfig(by=("k",)), 2), (SortConfig(by=("k", "i"), curve="zorder"), 1)],
    ids=["as-read", "three-files-one-task", "sorted", "zorder"],
)
def test_a_merge_written_as_one_partition_writes_the_files_write_files_writes(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch, order: SortConfig | None, files: int
) -> None:
    calls: list[str] = []
    write = partition_write.write_one_partition

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(table)
        return write(*args, **kwargs)

    monkeypatch.setattr(transaction, "write_one_partition", counted)
    merged: dict[str, Any] = {}
    for table, switch in (("one_partition", "true"), ("write_files", "false")):
        segments = [load(spark, warehouse, table, day) for day in range(3)]
        before = rows_checksum(spark.read.format("delta").load(table_uri(warehouse, table)))
        plan = make_plan(table, "minor", segments)
        # files of a third (or a half) of the input: `write_tasks=1` cuts one task's rows into them
        settings = MergeSettings(
            order=order,
            driver_max_bytes=0,
            target_file_bytes=plan.bytes_in // files + 1,
            write_tasks=1 if files == 3 else None,
        )
        spark.conf.set(WRITE_ONE_PARTITION, switch)
        try:
            commit = execute_merge(spark, warehouse, plan, settings)
        finally:
            spark.conf.unset(WRITE_ONE_PARTITION)
        after = spark.read.format("delta").load(table_uri(warehouse, table))
        assert rows_checksum(after) == before and commit.records_out == 90
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table_uri(warehouse, table)}` LIMIT 1").first()
        merged[table] = (_written(warehouse, table, commit.version), commit, history["operationMetrics"])

    assert calls == ["one_partition"], "only the first table took the one-partition write"
    (ours, our_commit, our_metrics), (theirs, _, their_metrics) = (
        merged["one_partition"],
        merged["write_files"],
    )
    assert len(ours) == len(theirs) == files
    output = our_commit.outputs[0].id
    for add in ours:
        assert add["path"].startswith(f"{SEGMENT_COLUMN}={output}/part-0000")
        assert add["partitionValues"] == {SEGMENT_COLUMN: output} and add["dataChange"] is False
    ours.sort(key=lambda a: json.loads(a["stats"])["minValues"]["k"])
    theirs.sort(key=lambda a: json.loads(a["stats"])["minValues"]["k"])
    for mine, other in zip(ours, theirs, strict=True):
        assert json.loads(mine["stats"]) == json.loads(other["stats"]), "Delta statistics"
        mine_path, other_path = (
            str(warehouse / t / a["path"]) for t, a in (("one_partition", mine), ("write_files", other))
        )
        mine_facts, other_facts = footer_facts(mine_path), footer_facts(other_path)
        assert mine_facts.pop(SEGMENT_COLUMN)[3:5] == (output, output)
        other_facts.pop(SEGMENT_COLUMN)
        assert mine_facts == other_facts, "codec, types and Parquet statistics"
        assert pq.read_schema(mine_path).equals(pq.read_schema(other_path)), "columns, types, nullability"
        assert (
            pq.read_table(mine_path).column("k").to_pylist()
            == pq.read_table(other_path).column("k").to_pylist()
        ), "the rows in the same order"
    assert our_metrics["numOutputRows"] == their_metrics["numOutputRows"] == "90"
    assert our_metrics["numFiles"] == their_metrics["numFiles"] == str(files)
    assert our_metrics.keys() == their_metrics.keys(), "the commit's operation metrics"
    assert int(our_metrics["numOutputBytes"]) == sum(a["size"] for a in ours) == our_commit.bytes_out


def test_only_tables_whose_files_it_writes_exactly_are_written_as_one_partition() -> None:
    partition = {SEGMENT_COLUMN: "m-1"}
    assert refusal(PLAIN_PROTOCOL, METADATA, partition, {}) is None
    assert refusal(PLAIN_PROTOCOL, METADATA, partition, {WRITE_ONE_PARTITION: "TRUE"}) is None
    assert refusal(PLAIN_PROTOCOL, METADATA, partition, {WRITE_ONE_PARTITION: "false"}) == (
        f"{WRITE_ONE_PARTITION} is off"
    )
    assert refusal(PLAIN_PROTOCOL, METADATA, partition, {DATA_SUBDIR: "true"}) == f"{DATA_SUBDIR} is on"
    two = {**METADATA, "partitionColumns": [SEGMENT_COLUMN, "region"]}
    assert refusal(PLAIN_PROTOCOL, two, partition, {}) == (
        "partition columns ['segment_id', 'region'], the output's values name ['segment_id']"
    )
    assert refusal(PLAIN_PROTOCOL, two, {**partition, "region": "eu"}, {}) is None
    unpartitioned = {**METADATA, "partitionColumns": []}
    assert refusal(PLAIN_PROTOCOL, unpartitioned, partition, {}) is not None
    iceberg = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": [],
        "writerFeatures": ["icebergCompatV2"],
    }
    assert refusal(iceberg, METADATA, partition, {}) == "table features ['icebergCompatV2']"
    tracked = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"], "writerFeatures": ["rowTracking", "deletionVectors", "domainMetadata"]}  # fmt: skip
    assert refusal(tracked, METADATA, partition, {}) is None
    mapped = {**METADATA, "configuration": {"delta.columnMapping.mode": "name"}}
    assert refusal(PLAIN_PROTOCOL, mapped, partition, {}) == "column mapping"
    prefixed = {**METADATA, "configuration": {"delta.randomizeFilePrefixes": "True"}}
    assert refusal(PLAIN_PROTOCOL, prefixed, partition, {}) == "randomized file prefixes"
    point = {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": False, "metadata": {}}]}
    nested = {**METADATA, "schemaString": json.dumps({**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "p", "type": point, "nullable": True, "metadata": {}}]})}  # fmt: skip
    assert refusal(PLAIN_PROTOCOL, nested, partition, {}) == "nested column(s) ['p']"


@pytest.mark.integration
def test_a_certificate_taken_by_observations_keeps_write_files(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the row-hash class a certificate's sums are Spark `Observation`s, which complete
    when a SQL execution ends: such a merge writes through `writeFiles`, which runs in one (the
    one-partition write, outside any, would leave the certificate waiting)."""
    calls: list[int] = []
    write = partition_write.write_one_partition
    monkeypatch.setattr(transaction, "write_one_partition", lambda *a, **k: calls.append(1) or write(*a, **k))
    monkeypatch.setattr(hash_counter, "loaded", lambda _spark: False)
    segments = [load(spark, warehouse, "observed", day) for day in range(2)]
    before = rows_checksum(spark.read.format("delta").load(table_uri(warehouse, "observed")))
    plan = make_plan("observed", "minor", segments)
    done: list[Any] = []
    merge = threading.Thread(
        target=lambda: done.append(execute_merge(spark, warehouse, plan, MergeSettings(driver_max_bytes=0))),
        daemon=True,  # a merge left waiting on its certificate must not keep the tests from ending
    )
    merge.start()
    merge.join(timeout=300)
    assert done, "the merge did not finish: its certificate waited for a SQL execution's end"
    (commit,) = done
    assert calls == [] and commit.certificate is not None and commit.certificate.holds
    assert rows_checksum(spark.read.format("delta").load(table_uri(warehouse, "observed"))) == before

"""Which merges the driver writes, and the statistics it merges (pure: no Spark)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compactor.config.sort import SortConfig
from compactor.delta.log.live_files import LiveFile
from compactor.delta.rewrite.driver_merge import merged_stats, refusal

PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 2}
FIELDS = [
    {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {}},
    {"name": "amount", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
    {"name": "segment_id", "type": "string", "nullable": True, "metadata": {}},
]
METADATA = {
    "schemaString": json.dumps({"type": "struct", "fields": FIELDS}),
    "partitionColumns": ["segment_id"],
}
TRACKED = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["rowTracking", "domainMetadata"]}
TRACKING = {
    **METADATA,
    "configuration": {
        "delta.enableRowTracking": "true",
        "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-1",
        "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-commit-version-col-2",
    },
}


def file(
    path: str = "segment_id=a/part-0.parquet", stats: dict[str, Any] | None = None, **add: Any
) -> LiveFile:
    action = {
        "path": path,
        "partitionValues": {"segment_id": "a"},
        "size": 100,
        "stats": json.dumps(stats or {"numRecords": 3}),
        **add,
    }
    found = LiveFile.of(action)
    assert found is not None
    return found


def test_a_plain_small_merge_may_be_written_by_the_driver() -> None:
    assert refusal(PROTOCOL, METADATA, [file(), file("segment_id=b/p.parquet")], "m-1", None, 1 << 20) is None
    assert refusal(PROTOCOL, METADATA, [file()], "m-1", SortConfig(by=("ts",)), 1 << 20) is None


def test_tables_with_row_tracking_or_identity_columns_may_be_written_by_the_driver() -> None:
    tracked = file(baseRowId=0, defaultRowCommitVersion=1)
    assert refusal(TRACKED, TRACKING, [tracked], "m-1", None, 1 << 20) is None
    identity = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["identityColumns"]}
    assert refusal(identity, METADATA, [file()], "m-1", None, 1 << 20) is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"inputs": []}, "every input is empty"),
        ({"max_bytes": 50}, "over the driver's 50"),
        ({"max_bytes": 0}, "over the driver's 0"),
        ({"order": SortConfig(by=("ts", "name"), curve="zorder")}, "a zorder layout"),
        ({"output": "m 1"}, "needs escaping"),
        ({"inputs": [file(deletionVector={"storageType": "u", "cardinality": 1})]}, "a deletion vector"),
        ({"inputs": [file(stats={"numRecords": 3, "tightBounds": False})]}, "no exact statistics"),
        ({"inputs": [file(stats={"minValues": {}})]}, "no exact statistics"),
        ({"inputs": [file("segment_id=a%3A1/p.parquet")]}, "an escaped path"),
        ({"metadata": {**METADATA, "configuration": {"delta.columnMapping.mode": "name"}}}, "column mapping"),
        ({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"], "writerFeatures": ["typeWidening"]}}, "typeWidening"),
        ({"metadata": {**METADATA, "schemaString": json.dumps({"type": "struct", "fields": [{"name": "s", "type": {"type": "struct", "fields": []}, "nullable": True, "metadata": {}}]})}}, "nested"),
        ({"protocol": TRACKED, "metadata": TRACKING, "inputs": [file(defaultRowCommitVersion=1)]}, "no base row id"),
        ({"protocol": TRACKED, "metadata": TRACKING, "inputs": [file(baseRowId=0)]}, "no base row id"),
        ({"protocol": TRACKED, "metadata": {**TRACKING, "configuration": {"delta.enableRowTracking": "true"}}},
         "materialised columns' names"),
    ],
)  # fmt: skip
def test_what_the_driver_leaves_to_spark(change: dict[str, Any], why: str) -> None:
    args: dict[str, Any] = {
        "protocol": PROTOCOL, "metadata": METADATA, "inputs": [file()], "output": "m-1", "order": None,
        "max_bytes": 1 << 20,
    } | change  # fmt: skip
    found = refusal(
        args["protocol"], args["metadata"], args["inputs"], args["output"], args["order"], args["max_bytes"]
    )
    assert found is not None and why in found


def test_merged_statistics_compare_in_each_column_s_type_and_keep_each_value_as_written() -> None:
    first = (
        '{"numRecords":3,"minValues":{"ts":"2024-01-01T10:00:00.000Z","name":"b","amount":10.50},'
        '"maxValues":{"ts":"2024-01-01T12:00:00.000Z","name":"é","amount":99.00},'
        '"nullCount":{"ts":0,"name":1,"amount":0}}'
    )
    second = (  # name: all null in this file, so no minimum or maximum
        '{"numRecords":2,"minValues":{"ts":"2024-01-01T09:30:00.000+00:00","amount":2.00},'
        '"maxValues":{"ts":"2024-01-01T11:00:00.000Z","amount":100.25},'
        '"nullCount":{"ts":0,"name":2,"amount":1}}'
    )
    texts = [first, second]
    merged = merged_stats(texts, METADATA)
    assert merged == (
        '{"numRecords":5,"minValues":{"ts":"2024-01-01T09:30:00.000+00:00","name":"b","amount":2.00},'
        '"maxValues":{"ts":"2024-01-01T12:00:00.000Z","name":"é","amount":100.25},'
        '"nullCount":{"ts":0,"name":3,"amount":1}}'
    )


def test_strings_compare_by_their_utf8_bytes_as_spark_compares_them() -> None:
    # U+FF61 sorts above U+10000 in UTF-16 code units (Java's String order), below it in UTF-8
    a = {"numRecords": 1, "maxValues": {"name": "\uff61"}}
    b = {"numRecords": 1, "maxValues": {"name": "\U00010000"}}
    merged = json.loads(merged_stats([json.dumps(a), json.dumps(b)], METADATA))
    assert merged["maxValues"]["name"] == "\U00010000"


def test_a_bound_or_null_count_one_file_leaves_out_is_unknown_for_the_union() -> None:
    """A file with values but no bound (footer statistics leave out a column Parquet kept no
    statistics of; Delta leaves out a string maximum it cannot cut) must not let the others' bound stand for the merged file:
    a reader would skip it for rows it holds. A column only of nulls in a file has no bound and
    does not count; a null count a file lacks leaves the sum unknown too."""
    bounded = {"numRecords": 2, "minValues": {"name": "m", "amount": 5}, "maxValues": {"name": "p", "amount": 7},
               "nullCount": {"name": 0, "amount": 0, "ts": 0}}  # fmt: skip
    unbounded = {
        "numRecords": 2,
        "minValues": {},
        "maxValues": {"name": "q"},
        "nullCount": {"name": 2, "ts": 0},
    }
    merged = json.loads(merged_stats([json.dumps(bounded), json.dumps(unbounded)], METADATA))
    assert merged == {
        "numRecords": 4,
        "minValues": {"name": "m"},  # the second file's names are all null: its minimum is no loss
        "maxValues": {"name": "q"},
        "nullCount": {"name": 2, "ts": 0},  # amount's count is unknown in the second file
    }

"""Which Delta table features a merge preserves and which it refuses, by name."""

from __future__ import annotations

import json

import pytest

from compactor.delta.features import (
    direct_commit_refusal,
    features,
    overwrite_refusal,
    refused_features,
    row_tracking_columns,
    table_config,
    table_flag,
)

MODERN = {"minReaderVersion": 3, "minWriterVersion": 7}
ROW_TRACKING = {
    "delta.enableRowTracking": "true",
    "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-1",
    "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-commit-version-col-2",
}
IDENTITY = [
    {"name": "id", "type": "long", "nullable": False,
     "metadata": {"delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.highWaterMark": 9,
                  "delta.identity.allowExplicitInsert": False}},
    {"name": "x", "type": "long", "nullable": True, "metadata": {}},
]  # fmt: skip


def metadata(
    configuration: dict[str, str] | None = None, fields: list[dict[str, object]] | None = None
) -> dict[str, object]:
    schema = {
        "type": "struct",
        "fields": fields or [{"name": "x", "type": "long", "nullable": True, "metadata": {}}],
    }
    return {"configuration": configuration or {}, "schemaString": json.dumps(schema)}


@pytest.mark.parametrize(
    "protocol",
    [
        {"minReaderVersion": 1, "minWriterVersion": 2},
        {"minReaderVersion": 2, "minWriterVersion": 5},  # legacy column mapping
        MODERN | {"readerFeatures": ["deletionVectors", "columnMapping"],
                  "writerFeatures": ["deletionVectors", "columnMapping", "changeDataFeed", "appendOnly",
                                     "invariants", "checkConstraints", "generatedColumns", "timestampNtz",
                                     "domainMetadata", "v2Checkpoint", "inCommitTimestamp"]},
    ],
)  # fmt: skip
def test_tables_whose_features_a_merge_preserves_are_accepted(protocol: dict[str, object]) -> None:
    assert refused_features(protocol, metadata()) == []


def test_legacy_protocols_imply_their_features() -> None:
    assert features({"minReaderVersion": 1, "minWriterVersion": 4}) == {
        "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
    }  # fmt: skip
    assert features({"minReaderVersion": 1, "minWriterVersion": 1}) == set()


@pytest.mark.parametrize(
    ("protocol", "meta", "named"),
    [
        ({"minWriterVersion": 2}, metadata({"delta.appendOnly": "true"}), "delta.appendOnly=true"),
        ({"minWriterVersion": 2}, metadata({"Delta.AppendOnly": "TRUE"}), "delta.appendOnly=true"),
        # kept by the direct commit only: refused where Delta's generic overwrite would be the path
        (MODERN | {"writerFeatures": ["rowTracking", "domainMetadata", "collations-preview"]},
         metadata(ROW_TRACKING), "rowTracking is enabled: Delta's generic overwrite would assign new row ids"),
        (MODERN | {"writerFeatures": ["identityColumns", "collations-preview"]}, metadata(fields=IDENTITY),
         "refuses the values of id, the only path for a table with collations-preview"),
        (MODERN | {"writerFeatures": ["clustering", "domainMetadata"]}, metadata(), "clustering"),
        (MODERN | {"readerFeatures": ["futureFeature"], "writerFeatures": ["futureFeature"]}, metadata(),
         "'futureFeature'"),
    ],
)  # fmt: skip
def test_features_a_merge_cannot_preserve_are_refused_by_name(
    protocol: dict[str, object], meta: dict[str, object], named: str
) -> None:
    reasons = refused_features(protocol, meta)
    assert len(reasons) == 1 and named in reasons[0]


def test_row_tracking_supported_but_not_enabled_is_accepted() -> None:
    protocol = MODERN | {"writerFeatures": ["rowTracking", "domainMetadata"]}
    assert refused_features(protocol, metadata({"delta.enableRowTracking": "false"})) == []
    assert row_tracking_columns(protocol, metadata({"delta.enableRowTracking": "false"})) is None


@pytest.mark.parametrize(
    ("protocol", "meta"),
    [
        (MODERN | {"writerFeatures": ["rowTracking", "domainMetadata"]}, metadata(ROW_TRACKING)),
        ({"minReaderVersion": 1, "minWriterVersion": 6}, metadata(fields=IDENTITY)),
        (MODERN | {"writerFeatures": ["identityColumns", "rowTracking", "domainMetadata", "deletionVectors"]},
         metadata(ROW_TRACKING, IDENTITY)),
    ],
)  # fmt: skip
def test_row_tracking_and_identity_columns_are_kept_by_the_direct_commit(
    protocol: dict[str, object], meta: dict[str, object]
) -> None:
    """Tables with row tracking enabled or an identity column merge, through the direct commit
    (the only path that keeps them), and say what the generic overwrite would not keep."""
    assert refused_features(protocol, meta) == []
    assert direct_commit_refusal(protocol) is None
    assert overwrite_refusal(protocol, meta) is not None


def test_the_materialised_row_tracking_columns_are_read_from_the_configuration() -> None:
    protocol = MODERN | {"writerFeatures": ["rowTracking", "domainMetadata"]}
    assert row_tracking_columns(protocol, metadata(ROW_TRACKING)) == (
        "_row-id-col-1",
        "_row-commit-version-col-2",
    )
    assert (
        row_tracking_columns(MODERN | {"writerFeatures": ["domainMetadata"]}, metadata(ROW_TRACKING)) is None
    )
    assert overwrite_refusal(protocol, metadata()) is None


def test_a_boolean_property_is_read_as_delta_reads_it_in_any_case() -> None:
    config = table_config(metadata({"Delta.EnableRowTracking": "TRUE", "delta.appendOnly": "false"}))
    assert table_flag(config, "delta.enablerowtracking") is True
    assert table_flag(config, "delta.appendonly") is False
    assert table_flag(config, "delta.randomizefileprefixes") is False
    assert table_flag(config, "delta.writepartitioncolumnstoparquet", default=True) is True

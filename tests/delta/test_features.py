"""Which Delta table features a merge preserves and which it refuses, by name."""

from __future__ import annotations

import json

import pytest

from compactor.delta.features import features, refused_features

MODERN = {"minReaderVersion": 3, "minWriterVersion": 7}


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
        (MODERN | {"writerFeatures": ["rowTracking", "domainMetadata"]},
         metadata({"delta.enableRowTracking": "true"}), "rowTracking"),
        ({"minWriterVersion": 6},
         metadata(fields=[{"name": "id", "type": "long", "nullable": False,
                           "metadata": {"delta.identity.start": 1, "delta.identity.step": 1}}]),
         "identityColumns: id"),
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

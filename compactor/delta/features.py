"""Which Delta table features a merge preserves, and which it must refuse (pure).

A merge reads an input segment's rows and writes them back as new files in one
Delta commit. Delta applies most table features to that commit as it does to
any write (constraints, generated columns, the change feed, column mapping,
deletion vectors are resolved on read). Two need the rewrite itself to carry
them, as Delta's OPTIMIZE does, which the direct commit (`transaction`) does:

- row tracking: each row's stable id and commit version are written into the
  materialised columns the table's configuration names, and Delta's commit gives
  the new files their `baseRowId` and `defaultRowCommitVersion` (PROTOCOL.md,
  "Row Tracking");
- identity columns: the values are written as they were read (the transaction's
  own writer takes explicit values), the column's high-water mark is untouched.

Delta's generic overwrite (`replaceWhere`, the path for tables the direct commit
does not serve yet) carries neither: it assigns new row ids and refuses explicit
identity values. A table that would need it for these is refused, and so is a
table with a feature no rewrite is known to preserve, with the feature named,
instead of being silently changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Features a rewrite keeps intact because Delta enforces or resolves them on every write/read.
PRESERVED = frozenset(
    {
        "appendOnly",  # the feature is implied by writer version 2; only the property forbids removes
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",  # rows are rewritten with their generated values, which Delta re-checks
        "columnMapping",
        "deletionVectors",  # deleted rows are not read, so they are not rewritten
        "timestampNtz",
        "domainMetadata",
        "v2Checkpoint",
        "typeWidening",
        "typeWidening-preview",
        "inCommitTimestamp",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
        "checkpointProtection",
        "allowColumnDefaults",
        "icebergCompatV1",
        "icebergCompatV2",
        "collations-preview",
        "rowTracking",  # ids and commit versions carried in the materialised columns (direct commit only)
        "identityColumns",  # values carried as read (direct commit only)
    }
)
# Of those, the ones the direct commit (`transaction`) is not yet tested with: a table with any of
# them commits through Delta's generic overwrite instead, which applies them as any write does,
# uncertified (rowTracking and identityColumns are served by the direct commit, and only by it).
# The direct commit writes through Delta's own transactional writer and commit, so type widening,
# variants and Iceberg compatibility are Delta's to apply there too (tests/delta/test_table_kinds.py);
# delta-spark 4.x creates no table with collations, so none has been merged to test it.
NOT_YET_DIRECT = frozenset({"collations-preview"})
# Features implied by a legacy protocol (no feature lists): minWriterVersion -> features.
_LEGACY_WRITER = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}

# Features that change nothing about how a file of unchanged rows is written: a rewrite that
# writes its files itself (the driver's Arrow merge, a write as one partition) serves only these.
PLAIN_FILE_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "timestampNtz",
        "deletionVectors",
        "domainMetadata",
        "vacuumProtocolCheck",
        "v2Checkpoint",
        "checkpointProtection",
        "inCommitTimestamp",
        "identityColumns",  # the values are copied; the high-water mark lives in the metadata
        "rowTracking",  # ids and commit versions written to the materialised columns (`_read`)
    }
)


def features(protocol: Mapping[str, Any]) -> set[str]:
    """Every feature the protocol action names or implies."""
    named = set(protocol.get("readerFeatures") or ()) | set(protocol.get("writerFeatures") or ())
    if named:
        return named
    version = int(protocol.get("minWriterVersion", 1))
    return {f for v, implied in _LEGACY_WRITER.items() if v <= version for f in implied}


def refused_features(protocol: Mapping[str, Any], metadata: Mapping[str, Any]) -> list[str]:
    """Why a merge cannot rewrite this table, one line per feature; empty when it can.

    `protocol` and `metadata` are the snapshot's `protocol` and `metaData` actions
    as the Delta protocol writes them (JSON objects).
    """
    reasons = []
    if table_flag(table_config(metadata), "delta.appendonly"):
        reasons.append(
            "delta.appendOnly=true: a merge removes its input files, which an append-only table forbids"
        )
    waiting = sorted(features(protocol) & NOT_YET_DIRECT)
    unfaithful = overwrite_refusal(protocol, metadata)
    if waiting and unfaithful is not None:
        reasons.append(
            f"{unfaithful}, the only path for a table with {', '.join(waiting)} (not yet on the direct commit)"
        )
    for name in sorted(features(protocol) - PRESERVED):
        if name == "clustering":
            reasons.append("clustering (liquid clustering): compacted tables are partitioned by segment_id")
        else:
            reasons.append(f"table feature {name!r} is not one a merge is known to preserve")
    return reasons


def table_config(metadata: Mapping[str, Any]) -> dict[str, str]:
    """The table's properties (the `metaData` action's `configuration`), keys in lower case as
    Delta matches them, values as text."""
    return {k.lower(): str(v) for k, v in (metadata.get("configuration") or {}).items()}


def table_flag(config: Mapping[str, str], key: str, default: bool = False) -> bool:
    """A boolean property of `table_config` (its key in lower case), as Delta reads it: any
    case of "true" is true."""
    value = config.get(key)
    return default if value is None else value.lower() == "true"


def row_tracking_columns(protocol: Mapping[str, Any], metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """The materialised row id and row commit version columns a rewrite writes, when the table
    has row tracking enabled (None: rows carry no id a rewrite must keep)."""
    config = table_config(metadata)
    if not table_flag(config, "delta.enablerowtracking") or "rowTracking" not in features(protocol):
        return None
    return (
        config.get("delta.rowtracking.materializedrowidcolumnname", ""),
        config.get("delta.rowtracking.materializedrowcommitversioncolumnname", ""),
    )


def overwrite_refusal(protocol: Mapping[str, Any], metadata: Mapping[str, Any]) -> str | None:
    """Why Delta's generic overwrite cannot rewrite this table faithfully (None: it can)."""
    reasons = []
    if row_tracking_columns(protocol, metadata) is not None:
        reasons.append("rowTracking is enabled: Delta's generic overwrite would assign new row ids")
    identity = identity_columns(metadata)
    if identity:
        reasons.append(
            f"identityColumns: Delta's generic overwrite refuses the values of {', '.join(identity)}"
        )
    return "; ".join(reasons) or None


def identity_columns(metadata: Mapping[str, Any]) -> list[str]:
    """The table's identity columns (`GENERATED ... AS IDENTITY`), by name."""
    try:
        schema = json.loads(metadata.get("schemaString") or "{}")
    except json.JSONDecodeError:
        return []
    return [
        str(f.get("name"))
        for f in schema.get("fields", ())
        if any(k.startswith("delta.identity.") for k in (f.get("metadata") or {}))
    ]


def direct_commit_refusal(protocol: Mapping[str, Any]) -> str | None:
    """Why the table's commits take Delta's generic overwrite rather than the direct commit;
    None when the direct commit serves it."""
    waiting = sorted(features(protocol) & NOT_YET_DIRECT)
    if not waiting:
        return None
    return f"table feature(s) {', '.join(waiting)}: not yet on the direct commit path"

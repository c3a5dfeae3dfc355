"""What each of our commits records in its `userMetadata`, and reading it back.

Loads, merges and refreshes write a small JSON document: the segments added
(with every field), the ids removed, the plan and rule, and whether the commit
changed rows; a rewrite, its content certificate. The catalog is folded from these records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from compactor.catalog.changes import CommitRecord
from compactor.domain.certificate import Certificate
from compactor.domain.plans import MergePlan
from compactor.domain.segment_json import segment_from_dict, segment_to_dict
from compactor.domain.segments import Segment, utc

METADATA_KEY = "compactor"


def commit_metadata(
    op: str,
    added: list[Segment],
    removed: tuple[str, ...] = (),
    plan: MergePlan | None = None,
    data_change: bool = True,
    exact_sizes: bool = False,
    certificate: Certificate | None = None,
) -> str:
    """The commit's userMetadata: what it did to the segment set, which plan did it, and
    whether it changed rows (False: the commit only rearranged them, `dataChange=false`).
    `exact_sizes`: the added segments' records and bytes are the commit's (a merge that moved
    files has no write metrics to take them from). `certificate`: the rows the rewrite read and
    wrote, fingerprinted, for `compactor verify` to check again."""
    return json.dumps(
        {
            METADATA_KEY: 1,
            "op": op,
            "added": [segment_to_dict(s) for s in added],
            "removed": list(removed),
            "plan_id": plan.plan_id if plan else None,
            "rule": plan.rule if plan else None,
            "level": plan.level if plan else None,
            "pool": plan.pool if plan else None,
            "data_change": data_change,
            **({"exact_sizes": True} if exact_sizes else {}),
            **({"certificate": certificate.to_metadata()} if certificate is not None else {}),
        },
        separators=(",", ":"),
    )


def plan_marker(plan_id: str) -> str:
    """Text that appears in the userMetadata of exactly the commit of `plan_id`."""
    return f'"plan_id":"{plan_id}"'


def parse_metadata(text: str | None) -> dict[str, Any] | None:
    """Our metadata document, or None for a commit someone else wrote."""
    if not text:
        return None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError:
        return None
    return meta if isinstance(meta, dict) and meta.get(METADATA_KEY) == 1 else None


def commit_record(
    table: str,
    version: int,
    meta: Mapping[str, Any],
    metrics: Mapping[str, Any] | None,
    committed_at: datetime | None = None,
) -> CommitRecord:
    """One commit as the catalog folds it."""
    numbers = {k: int(v) for k, v in (metrics or {}).items() if str(v).lstrip("-").isdigit()}
    return CommitRecord(
        table=table,
        version=version,
        added=tuple(segment_from_dict(s) for s in meta.get("added", [])),
        removed=tuple(meta.get("removed", [])),
        plan_id=meta.get("plan_id"),
        op=str(meta.get("op", "load")),
        rule=meta.get("rule"),
        level=meta.get("level"),
        pool=meta.get("pool"),
        metrics=numbers,
        data_change=bool(meta.get("data_change", True)),
        committed_at=utc(committed_at) if committed_at else None,
    )

"""What happened to each job's lease, kept in the warehouse for `compactor status`.

A job whose session is lost keeps running and rejoins (`kafka.lease`). The operator should still
see that it happened: each job writes its lease's notes (lost, rejoined, a consumer rebuilt) to
`<warehouse>/_compactor/leases/<member>.json` as they happen, the newest `KEPT` of them, through
the job's file systems (one small write per event, off the batches' path). `compactor status`
reads every job's file.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from compactor.delta.files import HadoopFiles
from compactor.delta.paths import state_uri
from compactor.kafka.lease import ControllerLease, LeaseNote

log = logging.getLogger(__name__)

KEPT = 20
FOLDER = "leases"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@:-]")


class LeaseLog:
    """Writes a lease's notes as they come (a listener of the lease)."""

    def __init__(self, files: HadoopFiles, warehouse: str, lease: ControllerLease) -> None:
        self.files = files
        self.lease = lease
        name = lease.member_name or lease.identity
        self.uri = f"{state_uri(warehouse, FOLDER)}/{_UNSAFE.sub('_', name)}.json"
        lease.listeners.append(self.write)

    def write(self, _: LeaseNote | None = None) -> None:
        doc = {
            "member": self.lease.member_name,
            "client": self.lease.identity,
            "group": self.lease.group,
            "notes": [asdict(n) for n in self.lease.notes[-KEPT:]],
        }
        try:
            self.files.write_text(self.uri, json.dumps(doc))
        except Exception:  # the record is for the operator: a failed write never stops the lease
            log.exception("lease log: writing %s failed", self.uri)


def read_lease_logs(files: HadoopFiles, warehouse: str) -> list[dict[str, Any]]:
    """Every job's lease record in the warehouse, by client name."""
    folder = state_uri(warehouse, FOLDER)
    found = []
    for name in sorted(files.list_names(folder)):
        text = files.read_text(f"{folder}/{name}") if name.endswith(".json") else None
        if text:
            found.append(json.loads(text))
    return found


def lease_lines(records: list[dict[str, Any]]) -> list[str]:
    """Each job's lease story in words: its outages (lost, rejoined after how long)."""
    lines = []
    for record in records:
        notes = record.get("notes") or []
        losses = [n for n in notes if n["kind"] == "lost"]
        if not losses and not any(n["kind"] == "rebuilt" for n in notes):
            continue
        last = notes[-1]
        state = (
            f"rejoined at {_at(last['at'])} after a {last['outage_s']:.0f}s outage"
            if last["kind"] == "rejoined"
            else f"{last['kind']} at {_at(last['at'])}: {last['why']}; rejoining"
        )
        lines.append(f"  {record['client']}: {len(losses)} lost session(s) recorded; {state}")
    return ["lease:", *lines] if lines else []


def _at(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

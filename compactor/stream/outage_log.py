"""What each shard's job says of an outage, kept in the warehouse for `compactor status`.

While an outage pauses a shard's attempts (`outages.Outages`), its job writes the outage in one
line to `<warehouse>/_compactor/outages/<shard>.json`, and marks it over when it ends. The
writes happen on the upkeep thread, never under the job's lock; during an object-store outage
they fail like everything else there, and are tried again until one lands (the status of a
warehouse nobody can read cannot be shown anyway).

An outage of the warehouse's store also fails the shard's streaming query, and the shard is
started again with nothing known of it: the outage ends with the shard that saw it. So a shard's
first write after its start marks an outage its file still shows as over (the years benchmark
found status showing every such outage as going on, hours after it ended).
"""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import UTC, datetime
from typing import Any

from compactor.delta.files import HadoopFiles
from compactor.delta.paths import state_uri
from compactor.stream.outages import Outage

log = logging.getLogger(__name__)

FOLDER = "outages"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@:-]")


class OutageLog:
    def __init__(self, files: HadoopFiles, warehouse: str, name: str) -> None:
        self.files = files
        self.uri = f"{state_uri(warehouse, FOLDER)}/{_UNSAFE.sub('_', name)}.json"
        self._written: Outage | None = None
        self._synced = False  # until the file is known not to show an outage of an earlier start

    def sync(self, outage: Outage | None) -> None:
        """Write the shard's outage (or that it is over) if that changed since the last write."""
        if self._synced and outage == self._written:
            return
        doc: dict[str, Any] = {"at": time.time(), "over": outage is None}
        shown = outage or self._written
        left = None
        try:
            if shown is not None:
                doc |= {"kind": shown.kind, "since": shown.since.isoformat(), "line": shown.line()}
            else:  # the first look after a start
                left = self._left_on()
                if left is None:
                    self._synced = True
                    return
                doc |= {k: left[k] for k in ("kind", "since", "line") if k in left}
            self.files.write_text(self.uri, json.dumps(doc))
        except Exception as exc:  # for the operator only: tried again at the next upkeep
            log.warning("outage log: updating %s failed (%s); trying again", self.uri, type(exc).__name__)
            self._synced = False
            return
        if left is not None:  # said as an outage a table's success ends is (`Outages.succeeded`)
            log.warning(
                "outage of %s since %s over: the shard started again after it",
                left.get("kind"),
                left.get("since"),
            )
        self._written, self._synced = outage, True

    def _left_on(self) -> dict[str, Any] | None:
        """The shard's record of an outage not marked over (by an earlier start), if any."""
        text = self.files.read_text(self.uri)
        doc = json.loads(text) if text else None
        return doc if isinstance(doc, dict) and not doc.get("over") else None


def outage_lines(files: HadoopFiles, warehouse: str) -> list[str]:
    """Each shard's outage now, and the last one over, in words."""
    folder = state_uri(warehouse, FOLDER)
    lines = []
    for name in sorted(files.list_names(folder)):
        text = files.read_text(f"{folder}/{name}") if name.endswith(".json") else None
        if not text:
            continue
        doc = json.loads(text)
        shard = name.removesuffix(".json")
        if doc.get("over"):
            if "kind" in doc:
                at = datetime.fromtimestamp(doc["at"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                lines.append(f"  {shard}: the last outage ({doc['kind']}) was over by {at}")
        else:
            lines.append(f"  {shard}: {doc['line']}")
    return ["outages:", *lines] if lines else []

"""How a warehouse's jobs split their work, recorded in the warehouse, and where each shard's
streaming checkpoint lives.

`<warehouse>/_compactor/shards-<topic>.json` holds the shard count and the segments
topic's partition count the jobs run with. A job configured otherwise refuses to start
unless it reshards (`compactor run --reshard`): a table's shard follows from both counts,
and each shard's query keeps its Kafka offsets in a checkpoint of its own.

A warehouse with no record runs as it always did: one job, one query, its checkpoint at the
`--checkpoint` location itself. Once recorded, shard i of n checkpoints to
`<checkpoint>/shards-<n>/shard-<i>`; a reshard moves to a fresh `shards-<m>` folder and
records where the old queries had got to, so that the new ones start there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from compactor.delta.files import HadoopFiles
from compactor.delta.paths import state_uri, warehouse_uri


@dataclass(frozen=True, slots=True)
class ShardRecord:
    shards: int
    partitions: int  # of the segments topic, when recorded
    # where each partition's processing had got to at the last reshard: a shard's first start
    offsets: dict[int, int] = field(default_factory=dict)
    since: str = ""  # when it was recorded (ISO 8601)

    def to_json(self) -> str:
        return json.dumps(
            {
                "shards": self.shards,
                "partitions": self.partitions,
                "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
                "since": self.since,
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> ShardRecord:
        doc = json.loads(text)
        return cls(
            int(doc["shards"]),
            int(doc["partitions"]),
            {int(p): int(o) for p, o in (doc.get("offsets") or {}).items()},
            str(doc.get("since") or ""),
        )


def record_uri(warehouse: Path | str, topic: str) -> str:
    return state_uri(warehouse, f"shards-{topic}.json")


def read_record(files: HadoopFiles, warehouse: Path | str, topic: str) -> ShardRecord | None:
    text = files.read_text(record_uri(warehouse, topic))
    return ShardRecord.from_json(text) if text else None


def write_record(files: HadoopFiles, warehouse: Path | str, topic: str, record: ShardRecord) -> None:
    files.write_text(record_uri(warehouse, topic), record.to_json())


def new_record(shards: int, partitions: int, offsets: dict[int, int], now: datetime) -> ShardRecord:
    return ShardRecord(shards, partitions, offsets, now.isoformat(timespec="seconds"))


def shard_checkpoint(checkpoint: Path | str, record: ShardRecord | None, shard: int) -> str:
    """Where shard `shard`'s query keeps its offsets (the location itself before any record)."""
    root = warehouse_uri(checkpoint)  # a path made absolute, a URI as given
    if record is None:
        return root
    return f"{root}/shards-{record.shards}/shard-{shard}"


def committed_offsets(files: HadoopFiles, checkpoint: str, topic: str) -> dict[int, int]:
    """Partition -> the offset a Spark checkpoint's last committed batch read up to (the next
    one to process). Empty for a query that never committed a batch."""
    batches = [int(n) for n in files.list_names(f"{checkpoint}/commits") if n.isdigit()]
    if not batches:
        return {}
    text = files.read_text(f"{checkpoint}/offsets/{max(batches)}") or ""
    # a version line, the batch's metadata, then one line of offsets per source
    for line in text.splitlines()[2:]:
        doc = json.loads(line) if line.strip().startswith("{") else {}
        if topic in doc:
            return {int(p): int(o) for p, o in doc[topic].items()}
    return {}


def processed_offsets(
    files: HadoopFiles, checkpoint: Path | str, record: ShardRecord | None, topic: str
) -> dict[int, int]:
    """Partition -> where the layout's queries have got to: each shard's last committed batch,
    and for a shard that never committed one, where the last reshard left its partitions."""
    found = dict(record.offsets) if record is not None else {}
    for shard in range(record.shards if record is not None else 1):
        found.update(committed_offsets(files, shard_checkpoint(checkpoint, record, shard), topic))
    return found


def clear_checkpoints(files: HadoopFiles, checkpoint: Path | str, shards: int) -> None:
    """Remove `<checkpoint>/shards-<shards>`: what an earlier run with that count left."""
    files.delete_tree(f"{warehouse_uri(checkpoint)}/shards-{shards}")

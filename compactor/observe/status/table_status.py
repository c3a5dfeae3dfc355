"""`compactor status`: each table as the warehouse tells it, in words or JSON (pure; no Spark)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from compactor.catalog.changes import CommitRecord
from compactor.catalog.failures import Failure
from compactor.domain.plans import MergePlan
from compactor.domain.segments import RowCount, Segment
from compactor.observe.status.table_health import TableFacts, TableHealth, assess
from compactor.rules.due import Due

LAST_MERGES = 5


@dataclass(frozen=True, slots=True)
class DeletedRows:
    """Rows other writers deleted that deletion vectors still hide in a table's files."""

    rows: int
    stored: int  # every row the files hold, visible or hidden
    purge_ratio: float | None  # a segment is purged at this share of hidden rows; None: never

    @classmethod
    def of(cls, counts: Iterable[RowCount], purge_ratio: float | None) -> DeletedRows:
        counted = [c for c in counts if c.visible >= 0]
        hidden = sum(c.hidden for c in counted)
        return cls(hidden, hidden + sum(c.visible for c in counted), purge_ratio)

    def to_json(self) -> dict[str, Any]:
        ratio = self.rows / self.stored if self.stored else 0.0
        return {"rows": self.rows, "ratio": round(ratio, 4), "purge_ratio": self.purge_ratio}

    def line(self) -> str:
        doc = self.to_json()
        purged = f"a segment is purged at {doc['purge_ratio']:.0%}" if self.purge_ratio else "purging is off"
        return f"  deleted rows in files: {self.rows} of {self.stored} ({doc['ratio']:.1%}); {purged}"


@dataclass(frozen=True, slots=True)
class LogState:
    """A table's Delta log: its newest version and its newest checkpoint's (-1: none)."""

    version: int
    checkpoint: int
    every: int  # the table's checkpoint_every

    @property
    def since(self) -> int:
        return max(0, self.version - self.checkpoint)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "checkpoint": self.checkpoint,
            "commits_since_checkpoint": self.since,
            "checkpoint_every": self.every,
        }

    def line(self) -> str:
        if self.checkpoint < 0:
            where = f"{self.since} commit(s), no checkpoint yet"
        else:
            where = f"{self.since} commit(s) since the checkpoint at version {self.checkpoint}"
        return f"  log: version {self.version}, {where} (one every {self.every})"


@dataclass(frozen=True, slots=True)
class TableStatus:
    table: str
    merging: bool
    segments: Sequence[Segment]
    ready: Sequence[MergePlan]  # what the rules would merge now
    merges: Sequence[CommitRecord]  # the newest merge commits, newest first
    failures: Sequence[Failure] = ()  # the newest failed plans, newest first
    now: datetime | None = None  # for what is still cooling down
    debt: dict[str, Any] | None = None  # the running job's last debt outlook (`DebtTrend`)
    late: dict[str, Any] | None = None  # late data waiting to fold (`late_data.summary`)
    due: Due | None = None  # when time alone may make its next merge possible, and why
    layout: str | None = None  # the order its rewrites apply (`zorder(a,b)`); None: rows as read
    deleted: DeletedRows | None = None  # rows other writers deleted that its files still hold
    commits: str | None = None  # how its merges commit: "direct", or the fallback and why
    health: TableHealth | None = None  # its state in a word, and its score
    key_index: dict[str, Any] | None = None  # upsert tables: its key index's latest snapshot
    log: LogState | None = None  # its Delta log: commits since the newest checkpoint

    def to_json(self) -> dict[str, Any]:
        by_level = Counter((s.level, str(s.state)) for s in self.segments)
        return {
            "table": self.table,
            "merging": "on" if self.merging else "off",
            "segments": len(self.segments),
            "bytes": sum(s.bytes for s in self.segments),
            "by_level_and_state": [
                {"level": level, "state": state, "segments": n}
                for (level, state), n in sorted(by_level.items())
            ],
            "ready": [
                {"rule": str(p.rule), "inputs": len(p.inputs), "bytes": p.bytes_in, "plan_id": p.plan_id}
                for p in self.ready
            ],
            "last_merges": [
                {
                    "version": c.version,
                    "rule": c.rule,
                    "level": c.level or c.pool,
                    "inputs": len(c.removed),
                    "outputs": [s.id for s in c.added],
                    "plan_id": c.plan_id,
                    "committed_at": c.committed_at.isoformat() if c.committed_at else None,
                }
                for c in self.merges
            ],
            "failures": [
                f.to_dict() | {"cooling": self.now is not None and f.until > self.now} for f in self.failures
            ],
            "debt": self.debt,
            "late_data": self.late,
            "next_due": due_json(self.due),
            "layout": self.layout,
            "deleted_rows": self.deleted.to_json() if self.deleted else None,
            "commits": self.commits,
            "key_index": self.key_index,
            "log": self.log.to_json() if self.log else None,
            **(self.health.to_json() if self.health else {}),
        }


def table_status(
    table: str,
    merging: bool,
    segments: Sequence[Segment],
    ready: Sequence[MergePlan],
    history: Sequence[CommitRecord],
    failures: Sequence[Failure] = (),
    now: datetime | None = None,
    debt: str | None = None,
    late: dict[str, Any] | None = None,
    due: Due | None = None,
    layout: str | None = None,
    deleted: DeletedRows | None = None,
    commits: str | None = None,
    health: TableHealth | None = None,
    key_index: dict[str, Any] | None = None,
    log: LogState | None = None,
) -> TableStatus:
    merges = [c for c in reversed(history) if c.op in {"merge", "refresh"}][:LAST_MERGES]
    return TableStatus(
        table,
        merging,
        segments,
        ready,
        merges,
        failures,
        now,
        json.loads(debt) if debt else None,
        late,
        due,
        layout,
        deleted,
        commits,
        health,
        key_index,
        log,
    )


def offline_health(
    merging: bool,
    quarantine: str | None,
    ready: Sequence[MergePlan],
    failures: Sequence[Failure],
    deleted: DeletedRows | None,
    total_bytes: int,
    max_debt: timedelta | None,
    now: datetime,
) -> TableHealth:
    """The table's word and score as `compactor status` sees it, from what the job saved (what
    runs right now is the running job's to say: its metrics and console)."""
    inputs = [s for p in ready for s in p.inputs]
    cooling = [f for f in failures if f.until > now]
    waiting = (
        f"cooling down after a failure until {min(f.until for f in cooling).isoformat()}"
        if inputs and cooling
        else None
    )
    oldest = min((s.loaded_at for s in inputs), default=None)
    return assess(
        TableFacts(
            merging_enabled=merging,
            quarantine=quarantine,
            waiting=waiting,
            awaiting_segments=len(inputs),
            awaiting_bytes=sum(s.bytes for s in inputs),
            total_bytes=total_bytes,
            hidden_rows=deleted.rows if deleted else 0,
            stored_rows=deleted.stored if deleted else 0,
            purge_ratio=deleted.purge_ratio if deleted else None,
            oldest_wait=now - oldest if oldest else None,
            objective=max_debt,
        )
    )


def render_top(healths: Sequence[tuple[str, TableHealth]]) -> str:
    """The least healthy tables, one line each: score, table, status."""
    width = max((len(t) for t, _ in healths), default=5)
    lines = [f"least healthy {len(healths)} table(s):", f"  health  {'table':<{width}}  status"]
    lines += [f"  {h.score:>6}  {t:<{width}}  {h.word}" for t, h in healths]
    return "\n".join(lines)


def due_json(due: Due | None) -> dict[str, Any] | None:
    return None if due is None else {"at": due.at.isoformat(), "why": due.why, "rule": due.rule}


def render(status: TableStatus) -> str:
    doc = status.to_json()
    lines = [
        f"table {status.table}: merging {doc['merging']}, {doc['segments']} segment(s), {doc['bytes']} bytes"
    ]
    if status.health is not None:
        lines.append(f"  status: {status.health.word}; health {status.health.score}/100")
    lines += [f"  level {e['level']} {e['state']}: {e['segments']}" for e in doc["by_level_and_state"]]
    waiting = sum(p["inputs"] for p in doc["ready"])
    lines.append(f"  ready to merge now: {len(doc['ready'])} plan(s) over {waiting} segment(s)")
    due = doc["next_due"]
    lines.append(f"  next due: {due['at']} ({due['why']})" if due else "  next due: on its next event only")
    lines.append(
        f"  merges lay rows out in: {doc['layout'] or 'the order they are read (no sort or time column)'}"
    )
    if status.commits is not None:
        lines.append(f"  merges commit: {status.commits}")
    if status.log is not None:
        lines.append(status.log.line())
    if status.deleted is not None:
        lines.append(status.deleted.line())
    if status.key_index is not None:
        lines.append("  " + key_index_line(status.key_index))
    if doc["debt"]:
        lines.append("  " + debt_line(doc["debt"]))
    if doc["late_data"]:
        lines += late_lines(doc["late_data"])
    if doc["last_merges"]:
        lines.append("  last merges:")
        lines += [
            f"    v{m['version']} {m['rule']} ({m['level'] or '-'})"
            + (f" at {m['committed_at']}" if m["committed_at"] else "")
            + f": {m['inputs']} -> {', '.join(m['outputs'])}"
            for m in doc["last_merges"]
        ]
    else:
        lines.append("  no merge yet")
    if doc["failures"]:
        lines.append("  failures:")
        lines += [
            f"    {f['at']} {f['rule'] or 'table'} {f['key']}: {f['reason']}"
            + (f" (cooling down until {f['until']})" if f["cooling"] else "")
            for f in doc["failures"]
        ]
    return "\n".join(lines)


def key_index_line(snapshot: dict[str, Any]) -> str:
    """An upsert table's key index as its latest snapshot tells it: what a restart reads back."""
    if not snapshot:
        return "key index: no snapshot yet (a restart reads the whole table once)"
    return (
        f"key index: snapshot of version {snapshot['version']}, {snapshot.get('keys', '?')} keys, "
        f"{snapshot.get('bytes', '?')} bytes, written {snapshot.get('written_at', '?')} "
        "(a restart reads back the snapshot and the loads since)"
    )


def debt_line(debt: dict[str, Any]) -> str:
    """The job's debt outlook in words: what waits, how fast it drains, when it is paid."""
    hours = debt["debt_ingest_hours"]
    eta = debt["eta_seconds"]
    parts = [
        f"merge debt (the job, at {debt['at']}): {debt['debt_segments']} segment(s), {debt['debt_bytes']} bytes",
        "no recent ingest to measure it by" if hours is None else f"{hours:g} h of ingest",
        f"draining {debt['drain_bytes_per_hour']} bytes/h",
        "not falling" if eta is None else f"paid in {eta} s",
    ]
    if debt["objective"]:
        parts.append(f"objective {debt['objective']}")
    if debt["stuck"]:
        parts.append("STUCK")
    if debt.get("deferring_optional"):
        parts.append("optional merges wait: the job is behind its events")
    return "; ".join(parts)


def late_lines(late: dict[str, Any]) -> list[str]:
    """Sealing in words: the watermark, then each bucket's late run and whether it folds now."""
    head = (
        f"  late data: watermark {late['watermark'] or '(no data)'}, {late['late_segments']} late segment(s)"
    )
    lines = [head]
    for b in late["buckets"]:
        share = f"{b['late_bytes'] / b['bucket_bytes']:.1%}" if b["bucket_bytes"] else "all"
        fold = f"folds now ({b['folds_now']})" if b["folds_now"] else "waits"
        lines.append(
            f"    {'sealed' if b['sealed'] else 'open'} {b['bucket']}: {b['late_segments']} late, "
            f"{b['late_bytes']} of {b['bucket_bytes']} bytes ({share}); {fold}"
        )
    return lines

"""`compactor plan`: a dry run of the rules over a file of segments (JSON output)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from compactor.config.sort import describe
from compactor.config.tables import ProjectConfig
from compactor.domain.plans import Decision, MergePlan
from compactor.domain.segment_json import segment_from_dict, segment_to_dict
from compactor.domain.segments import Segment
from compactor.errors import InvalidSegmentError
from compactor.observe.status.table_status import due_json
from compactor.rules.due import table_due
from compactor.rules.engine import Evaluation, evaluate
from compactor.rules.simulation import Simulation, check_segments


def read_segments(path: Path) -> list[Segment]:
    """A JSON array or JSON Lines of segments; errors name the record."""
    text = path.read_text()
    stripped = text.lstrip()
    records: list[tuple[str, Any]] = []
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidSegmentError(f"{path}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
        records = [(f"record {i + 1}", r) for i, r in enumerate(data)]
    else:
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InvalidSegmentError(f"{path}: line {n}: malformed JSON: {exc.msg}") from None
    segments = []
    for where, record in records:
        if not isinstance(record, dict):
            raise InvalidSegmentError(f"{path}: {where}: expected an object, got {type(record).__name__}")
        try:
            segments.append(segment_from_dict(record))
        except InvalidSegmentError as exc:
            raise InvalidSegmentError(f"{path}: {where} (id {record.get('id')!r}): {exc}") from None
    return segments


def _merge_json(plan: MergePlan) -> dict[str, Any]:
    out = plan.output
    sizes = {"records": out.records, "bytes": out.bytes, "sub_partitions": sorted(out.sub_partitions)}
    span = {"id": out.id, "start": out.start.isoformat(), "end": out.end.isoformat()}
    return plan.summary() | {"output": span | sizes}


def _explain(decisions: Sequence[Decision]) -> dict[str, list[dict[str, Any]]]:
    explained: dict[str, list[dict[str, Any]]] = {}
    for d in decisions:
        explained.setdefault(d.segment_id, []).append(
            {
                "rule": d.rule,
                "chosen": d.chosen,
                "reason": str(d.reason) if d.reason else None,
                "detail": d.detail,
                "plan_id": d.plan_id,
            }
        )
    return explained


def run_plan(
    config: ProjectConfig,
    segments: list[Segment],
    now: datetime | None = None,
    simulate: bool = False,
    rule: str | None = None,
    merge_ids: Sequence[str] = (),
    explain: bool = False,
) -> dict[str, Any]:
    """Everything `compactor plan` prints, as a dict (the contract: docs/rules/trying-rules.md)."""
    check_segments(segments, config)
    sim = Simulation(config)
    tables = list(dict.fromkeys(s.table for s in segments))
    latest = max((s.loaded_at for s in segments), default=None)
    if simulate:
        for s in segments:
            sim.arrive(s, now)
    else:
        for s in segments:
            sim.catalog.add(s)
    moment = now or latest
    evaluations: dict[str, Evaluation] = {}
    if moment is not None:
        for table in tables:
            if rule or not simulate:
                evaluations[table] = sim.attempt(table, moment, only_rule=rule)
        if merge_ids:
            sim.manual_merge(_table_of(merge_ids, segments, sim), merge_ids)
    result: dict[str, Any] = {
        "merges": [_merge_json(p) for p in sim.merges],
        "segments": [segment_to_dict(s) for t in tables for s in sim.catalog.segments(t)],
    }
    if explain and moment is not None:
        result["next_due"] = {
            t: due_json(
                table_due(sim.catalog.columns(t), config.for_table(t), moment, (), config.operations.off_peak)
            )
            for t in tables
        }
        result["layout"] = {t: describe(config.for_table(t).layout_order) for t in tables}
        # the evaluation that was run, or (after a simulation) why what is left stays
        result["explain"] = {
            t: _explain(
                (
                    evaluations.get(t)
                    or evaluate(t, sim.catalog.columns(t), config.for_table(t), moment, only_rule=rule)
                ).decisions
            )
            for t in tables
        }
    return result


def _table_of(ids: Sequence[str], segments: Sequence[Segment], sim: Simulation) -> str:
    tables = {t for t in sim.catalog.table_names if any(sim.catalog.get(t, i) for i in ids)}
    if len(tables) != 1:
        known = {s.table for s in segments}
        if not tables and len(known) == 1:
            return known.pop()
        raise InvalidSegmentError(f"--merge ids {', '.join(ids)} must name segments of exactly one table")
    return tables.pop()

"""Checking a table's rewrites after the fact: each merge, refresh or purge commit's inputs read
again at the version before it and its output at its own version (time travel), fingerprinted, and
compared with the certificate it committed (`compactor verify`).

The inputs are the rows of the segments the commit removed, the output those of the segments it
added, as a reader sees them then (deletion vectors of that version applied). A merge committed
without a certificate (before certificates, or with them off) is checked inputs
against output. An upsert merge drops superseded rows on purpose, and a refresh that changes
rows (a rollup, rounded times, a new column) certifies the rows its rule made of the inputs:
only their output is checked, against the certificate. A purge keeps every row its segments show:
they are read before and after it and compared (its certificate covers only the files it
rewrote, and must hold). A commit whose versions Delta no longer keeps (log retention, VACUUM)
is reported as not checkable, not as broken.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compactor.config.rules import RuleName
from compactor.delta.content.fingerprint import spark_fingerprint
from compactor.delta.log.commit_metadata import parse_metadata
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.domain.certificate import Certificate, Fingerprint

Verdict = Literal["holds", "broken", "not checkable"]
CHECKED = ("merge", "refresh", "purge")  # the rewrites whose commits carry a certificate


@dataclass(frozen=True, slots=True)
class Checked:
    """One rewrite commit (a merge, refresh or purge), checked."""

    table: str
    version: int
    plan_id: str | None
    rule: str | None
    verdict: Verdict
    detail: str
    inputs: Fingerprint | None = None
    output: Fingerprint | None = None

    def line(self) -> str:
        plan = f"plan {self.plan_id}" if self.plan_id else "no plan"
        return (
            f"{self.table} version {self.version} ({plan}, {self.rule or '-'}): {self.verdict}: {self.detail}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "plan_id": self.plan_id,
            "rule": self.rule,
            "verdict": self.verdict,
            "detail": self.detail,
            "inputs": self.inputs.to_dict() if self.inputs else None,
            "output": self.output.to_dict() if self.output else None,
        }


def verify_table(spark: SparkSession, warehouse: Path | str, table: str, since: int = 0) -> Iterator[Checked]:
    """Every merge, refresh and purge commit of `table` from version `since` on, oldest first, checked."""
    uri = table_uri(warehouse, table)
    history = DeltaTable.forPath(spark, uri).history().select("version", "userMetadata").collect()
    for row in sorted(history, key=lambda r: int(r["version"])):
        version, meta = int(row["version"]), parse_metadata(row["userMetadata"])
        if version < since or meta is None or meta.get("op") not in CHECKED:
            continue
        yield _check(spark, uri, table, version, meta)


def _check(spark: SparkSession, uri: str, table: str, version: int, meta: dict[str, Any]) -> Checked:
    plan_id, rule = meta.get("plan_id"), meta.get("rule")
    added = [str(s["id"]) for s in meta.get("added", [])]
    # a purge rewrites files within its segments: they show the same rows before and after it
    purge = meta.get("op") == "purge"
    removed = added if purge else [str(s) for s in meta.get("removed", [])]

    def found(
        verdict: Verdict, detail: str, inputs: Fingerprint | None = None, output: Fingerprint | None = None
    ) -> Checked:
        return Checked(table, version, plan_id, rule, verdict, detail, inputs, output)

    try:
        certificate = Certificate.from_dict(meta["certificate"]) if "certificate" in meta else None
    except ValueError as exc:
        return found("broken", f"its certificate does not read: {exc}")
    try:
        after = _segments(spark, uri, version, added)
        output = spark_fingerprint(after, after.columns)
        # rows dropped or changed on purpose: the inputs as read are not the certified ones
        transformed = rule == RuleName.UPSERT_COMPACTION or (
            meta.get("op") == "refresh" and meta.get("data_change", True)
        )
        inputs = None
        if not transformed:
            before = _segments(spark, uri, version - 1, removed)
            inputs = spark_fingerprint(before, before.columns)
    except Exception as exc:  # a version or a file Delta no longer keeps
        return found(
            "not checkable", f"reading versions {version - 1} and {version} failed: {_first_line(exc)}"
        )
    if purge and certificate is not None and not certificate.holds:
        return found("broken", f"its certificate does not hold: {certificate.mismatch()}", inputs, output)
    if certificate is None or purge:  # a purge's certificate covers only the files it rewrote
        if inputs is None:
            return found("not checkable", "rows changed on purpose, no certificate", output=output)
        if inputs != output:
            return found("broken", f"inputs {inputs} but output {output}", inputs, output)
        how = "its segments before and after" if purge else "no certificate: inputs against output"
        return found("holds", f"{output.rows} rows, {how}", inputs, output)
    problems = []
    if output != certificate.output:
        problems.append(f"its output reads {output} now, certified {certificate.output}")
    if inputs is not None and inputs != certificate.inputs:
        problems.append(f"its inputs read {inputs} at version {version - 1}, certified {certificate.inputs}")
    if not certificate.holds:
        problems.append(f"its certificate does not hold: {certificate.mismatch()}")
    if problems:
        return found("broken", "; ".join(problems), inputs, output)
    return found("holds", f"{output.rows} rows, as certified", inputs, output)


def _segments(spark: SparkSession, uri: str, version: int, segments: list[str]) -> DataFrame:
    frame = spark.read.format("delta").option("versionAsOf", version).load(uri)
    return frame.where(F.col(SEGMENT_COLUMN).isin(segments))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__

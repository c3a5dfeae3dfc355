"""The sequence every rewrite of a plan's inputs follows, with the rewrite's own step left open.

A merge, a refresh and a promotion differ only in how they produce their output's files. Around
that step they do the same thing, in the same order: open a transaction on the table's live
files, confirm the plan's inputs are live at its read version (or recognise the plan's earlier
commit, when a replayed batch or a duplicate event brings it again), check that the table's
features allow a rewrite, produce, call the caller's guard (a fenced shard's merge must not
commit), refuse the output unless its certificate holds (the rows it wrote are exactly the rows its
inputs held, `domain/certificate.py`), commit the outputs' files and the inputs' removal in ONE
version with the certificate in its metadata, and time it all.

A rewrite fills in `RewriteStep`: `produce` returns the files it wrote (`Produced`), or a
`Commit` it already made through Delta's generic overwrite, for a table the direct commit does
not serve (that write commits as it writes, so it must call the guard itself first).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from pyspark.sql import Column, DataFrame, SparkSession

from compactor.delta.commit.transaction import DirectTransaction, live_inputs
from compactor.delta.content.fingerprint import (
    Watch,
    observe,
    observed,
    observed_both,
    spark_fingerprints,
    sums_wait_for_sql_execution,
    table_columns,
)
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.log.live_files import LiveFile, LiveFileIndex, table_live_files
from compactor.delta.log.reader import CommitFacts
from compactor.delta.paths import table_uri
from compactor.domain.certificate import Certificate, Fingerprint, Winners
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import Segment
from compactor.errors import ContentMismatch

Guard = Callable[[], None]
# What a layout hands every row through once, after its last step that may change a row and before
# a coalesce that only groups them into files (a Spark stage of its own, so a fingerprint taken
# after it costs a large merge more).
Handed = Callable[[DataFrame], DataFrame]
# a rewrite's layout: the rows as read (and what to hand them through) -> the rows to write, and
# the writer's options
Layout = Callable[[DataFrame, Handed], tuple[DataFrame, dict[str, str]]]


@dataclass(frozen=True)
class Produced:
    """What a rewrite's step wrote, for the sequence to commit: the `adds` of its files, the
    input files they replace, the output segments (with their exact rows and bytes), whether
    the commit changes data, the order its rows were laid out in (`describe`), and whether
    Delta's incremental checksum may be kept (`after_commit` then writes one, or not)."""

    adds: list[dict[str, Any]]
    removed: list[LiveFile]
    outputs: tuple[Segment, ...]
    data_change: bool
    layout: str | None = None
    keep_checksum: bool = True
    after_commit: Callable[[int], None] | None = None
    certificate: Certificate | None = None  # None: a rewrite not certified (certificates off)
    read: list[LiveFile] | None = None  # the files the certificate's inputs read (None: `removed`)


class RewriteStep(Protocol):
    """A rewrite's own part of the sequence."""

    @property
    def kind(self) -> str:
        """The operation its commits are recorded as ("merge", "refresh")."""
        ...

    def replayed(self, facts: CommitFacts) -> Commit:
        """The plan's earlier commit (`facts`), as this rewrite reports it."""
        ...

    def produce(
        self,
        txn: DirectTransaction,
        live: LiveFileIndex,
        files: Mapping[str, list[LiveFile]],
        guard: Guard,
    ) -> Produced | Commit:
        """Write the output from the inputs' live `files` (by segment) in `txn`."""
        ...


def rewrite_in_one_commit(
    spark: SparkSession,
    warehouse: Path | str,
    plan: MergePlan,
    depth: int,
    step: RewriteStep,
    live: LiveFileIndex | None = None,
    guard: Guard = lambda: None,
) -> Commit:
    """Replace the plan's inputs with what `step` produces, in ONE Delta commit.

    `live`: the table's live files and log reader, kept by the caller (None: read afresh);
    `depth`: how many commits back a replay looks for the plan's earlier commit. Idempotent: an
    input no longer live means the plan committed before (its commit is found by the plan id in
    the commits' metadata and returned, `already_done`) or someone else removed it
    (`StalePlan`: nothing is committed, the caller re-plans). `guard` is called right before the
    commit (it raises to prevent it).
    """
    started = time.monotonic()
    path = table_uri(warehouse, plan.table)
    live = live or table_live_files(spark, path, plan.table)
    txn = DirectTransaction.begin(spark, path, live)
    files = live_inputs(spark, txn, live, plan, depth)
    if isinstance(files, CommitFacts):
        return step.replayed(files)
    txn.check_rewritable()
    writing = time.monotonic()
    produced = step.produce(txn, live, files, guard)
    if isinstance(produced, Commit):
        return produced
    outputs = produced.outputs
    certificate = produced.certificate
    refused = certificate_refusal(produced)
    if refused is not None:
        raise ContentMismatch(f"table {plan.table}: plan {plan.plan_id} not committed: {refused}")
    metadata = commit_metadata(
        step.kind,
        list(outputs),
        plan.input_ids,
        plan,
        produced.data_change,
        exact_sizes=True,
        certificate=certificate,
    )
    committing = time.monotonic()
    guard()
    version = txn.commit(
        produced.adds,
        produced.removed,
        produced.data_change,
        metadata,
        plan.input_ids,
        keep_checksum=produced.keep_checksum,
    )
    if produced.after_commit is not None:
        produced.after_commit(version)
    done = time.monotonic()
    return Commit(
        version,
        outputs,
        sum(o.records for o in outputs),
        sum(o.bytes for o in outputs),
        _ms(done - started),
        already_done=False,
        data_change=produced.data_change,
        layout=produced.layout,
        write_ms=_ms(committing - writing),
        commit_ms=_ms(done - committing),
        certificate=certificate,
    )


class SecondOpinion(NamedTuple):
    """What an upsert merge's key index says its inputs win (`Winners`), and the index's row hash
    as a Spark expression over the rows the merge keeps."""

    row_hash: Column
    expected: Fingerprint


def certified_write(
    txn: DirectTransaction,
    source: DataFrame,
    lay_out: Layout,
    read_apart: bool = False,
    second: SecondOpinion | None = None,
    into: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], Certificate]:
    """Write the rows of `source` as `lay_out` arranges them, fingerprinted as read and as handed
    to Delta's writer, both in the write's own job; `read_apart`: a layout that samples its input
    first (a range partitioning) would count the read twice, so there the inputs take a job of
    their own. `second`: the rows of `source` are also summed by the key index's row hash, in the
    same pass, for the certificate's winners check. `into`: the partition every row is written
    to (`DirectTransaction.write`)."""
    columns = table_columns(txn.metadata)
    also = second.row_hash if second is not None else None
    if read_apart:
        read_print: tuple[Fingerprint, Fingerprint | None] | Watch = spark_fingerprints(source, columns, also)
    else:
        source, read_print = observe(source, columns, also)
    watches: list[Watch] = []

    def handed(rows: DataFrame) -> DataFrame:
        rows, watch = observe(rows, columns)
        watches.append(watch)
        return rows

    output, options = lay_out(source, handed)
    if len(watches) != 1:
        raise AssertionError(f"a layout handed its rows through {len(watches)} times, not once")
    if sums_wait_for_sql_execution(txn.spark):
        into = None  # the one-partition write runs in no SQL execution: its sums would never come
    adds = txn.write(output, options, into)
    inputs, kept = read_print if isinstance(read_print, tuple) else observed_both(read_print)
    winners = Winners(second.expected, kept) if second is not None and kept is not None else None
    return adds, Certificate(inputs, observed(watches[0]), winners=winners)


def certificate_refusal(produced: Produced) -> str | None:
    """Why the output must not be committed: its certificate does not hold, the files written
    hold other than the rows handed to the writer (by their statistics, less the rows their
    deletion vectors hide), or (a rewrite that keeps every row) it read more or fewer rows than
    the log says its inputs show a reader, as a read that missed a deletion vector would (None:
    commit)."""
    certificate = produced.certificate
    if certificate is None:
        return None
    if not certificate.holds:
        return certificate.mismatch()
    held = rows_held(produced.adds)
    if held is not None and held != certificate.output.rows:
        return f"{certificate.output.rows} rows handed to the writer, but its files hold {held}"
    visible = [f.visible for f in (produced.removed if produced.read is None else produced.read)]
    shown = sum(v for v in visible if v is not None)
    if not produced.data_change and None not in visible and certificate.inputs.rows != shown:
        return (
            f"the inputs' files show a reader {shown} rows by the log's statistics and deletion "
            f"vectors, but {certificate.inputs.rows} were read"
        )
    return None


def rows_held(adds: list[dict[str, Any]]) -> int | None:
    """The rows a reader sees in the files of `adds`: each file's count from its statistics, less
    what its deletion vector hides (None: a file without a count)."""
    held = 0
    for add in adds:
        rows = json.loads(add.get("stats") or "{}").get("numRecords")
        if rows is None:
            return None
        held += int(rows) - int((add.get("deletionVector") or {}).get("cardinality", 0))
    return held


def _ms(seconds: float) -> int:
    return int(seconds * 1000)

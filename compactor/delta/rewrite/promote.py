"""A merge by metadata alone: well-sized input files move into the output segment, unrewritten.

When every file of a plan's inputs is already near the target size, rewriting them would copy
each byte only to give its rows a new segment id. Delta readers take a file's partition values
from the log, not from its path, and a commit may add a file the table already holds to replace
its metadata (the protocol; Delta's own statistics recomputation does so). One commit therefore
re-adds each input file with the output's `segment_id` and `dataChange=false`:

- readers see the old segments or the new one, never a mix (one commit);
- time travel to an older version still sees the old ids (its log says so);
- VACUUM keeps the files, which the table still references, and deletes them only after a
  later merge rewrites them;
- the transaction reads the inputs' files, so a concurrent delete of one of them fails the
  commit as a conflict.

The rewritten small inputs are certified as a merge's rows are (`domain/certificate.py`). The
moved files are read once, for their fingerprint alone (nothing is written of them): their rows
are the same on both sides of the certificate, which so records what the output holds as a whole,
and `compactor verify` finds a moved file replaced after the fact. That read (no write) is what
the certificate costs a promotion. Certified or not, the commit must show a reader exactly
the rows its inputs did by the log (each moved file's count less its deletion vector's, and the
written files' statistics), or nothing is committed.

A file keeps its path: its directory names the segment it was loaded as, which only readers
that guess partitions from paths instead of reading the Delta log would misread.

Delta derives a commit's checksum (the table's file count and size) from the previous one,
counting every `add` as a new file: a re-added file would make it wrong, and the next
checkpoint would fail its integrity check. The commit is made without one, and the job writes
the checksum itself from the previous version's and the files it knows it moved, removed and
wrote (`checksum_file`), so no reader rebuilds the table's state to find it.

Row tracking: a moved file is re-added with its own `baseRowId` and `defaultRowCommitVersion`
(the protocol asks a recommitted file to keep them), so its rows keep their ids and commit
versions with no materialised column; the rewritten small inputs keep theirs in the materialised
columns (`DirectTransaction.read`). New files raise the table's row id high-water mark, a domain
metadata the derived checksum would carry unchanged: such a commit leaves its checksum to Delta.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compactor.delta.commit.checksum_file import write_checksum_after
from compactor.delta.commit.transaction import DirectTransaction, segment_predicate
from compactor.delta.content.fingerprint import spark_fingerprint, table_columns
from compactor.delta.features import features
from compactor.delta.log.live_files import LiveFile
from compactor.delta.paths import SEGMENT_COLUMN, TARGET_FILE_BYTES
from compactor.delta.rewrite.one_commit import Handed, Produced, certificate_refusal, certified_write
from compactor.domain.certificate import Certificate, Fingerprint
from compactor.domain.plans import MergePlan
from compactor.errors import ContentMismatch

# A file at least this large is kept as it is: a rewrite would not make it better sized.
PROMOTE_MIN_FILE_BYTES = TARGET_FILE_BYTES // 2


def promote(
    txn: DirectTransaction,
    plan: MergePlan,
    files: Mapping[str, list[LiveFile]],
    min_file_bytes: int = PROMOTE_MIN_FILE_BYTES,
    certify: bool = True,
) -> Produced | None:
    """The plan's output in `txn` made by moving the files of its well-sized inputs (every file
    at least `min_file_bytes`) into the output segment and rewriting only the other inputs, for
    `one_commit` to commit; None (nothing written) when no input is well sized, or a file has no
    row count (the caller rewrites everything, as before). `files`: the inputs' live files, by
    segment.

    The rows of the small inputs are certified as a merge's (`certify`), and the moved files'
    rows are fingerprinted on both sides of the certificate (read, never written). Its whole output
    must hold as many rows as the log says the inputs show a reader (the moved files' counts and
    the written files' statistics), or `ContentMismatch` and nothing is committed."""
    kept = [
        sid for sid in plan.input_ids if files.get(sid) and all(f.size >= min_file_bytes for f in files[sid])
    ]
    every = [f for sid in plan.input_ids for f in files.get(sid, [])]
    if not kept or any(f.records is None for f in every):
        return None
    staying = [f for sid in kept for f in files[sid]]
    moved = [_moved(f, plan.output.id) for f in staying]
    small = [f for f in every if f.segment not in kept]
    predicate = segment_predicate(plan.input_ids)
    txn.track(every, predicate)  # every input is read: a concurrent delete of any one conflicts
    written, certificate = _rewritten(txn, plan, small, predicate, certify) if small else ([], None)
    if certify:  # the moved files' rows, the same on both sides: what the output holds, recorded
        stays = spark_fingerprint(txn.read(staying, segment_predicate(kept)), table_columns(txn.metadata))
        rewritten = certificate or Certificate(Fingerprint.empty(), Fingerprint.empty())
        certificate = Certificate(rewritten.inputs + stays, rewritten.output + stays)
    new_files = moved + written
    records = sum(f.visible or 0 for f in staying) + sum(_rows(a) for a in written)
    shown = sum(f.visible or 0 for f in every)
    if records != shown:
        raise ContentMismatch(
            f"table {plan.table}: plan {plan.plan_id} not committed: its inputs show a reader {shown} "
            f"rows by the log, but the files moved and written hold {records}"
        )
    output = replace(plan.output, records=records, bytes=sum(int(a["size"]) for a in new_files))

    def checksum(version: int) -> None:
        if not (written and "rowTracking" in features(txn.protocol)):  # else the high-water mark moved
            write_checksum_after(txn.spark, txn.path, txn.read_version, version, added=written, removed=small)

    return Produced(
        new_files,
        small,
        (output,),
        False,
        keep_checksum=False,
        after_commit=checksum,
        certificate=certificate,
        read=every,
    )


def _rewritten(
    txn: DirectTransaction, plan: MergePlan, small: list[LiveFile], predicate: Column, certify: bool
) -> tuple[list[dict[str, Any]], Certificate | None]:
    """The small inputs' rows written into the output segment; certified as a merge is (the
    rows read, as many as the log says they show, are the rows handed to the writer), or
    `ContentMismatch` and nothing written is committed."""
    rows = txn.read(small, predicate)
    into = {SEGMENT_COLUMN: plan.output.id}  # every row written is the output's
    if not certify:
        return txn.write(*_rewrite(rows, plan, small), into), None
    written, certificate = certified_write(
        txn, rows, lambda read, handed: _rewrite(read, plan, small, handed), into=into
    )
    refused = certificate_refusal(Produced(written, small, (), False, certificate=certificate))
    if refused is not None:
        raise ContentMismatch(f"table {plan.table}: plan {plan.plan_id} not committed: {refused}")
    return written, certificate


def _moved(file: LiveFile, segment_id: str) -> dict[str, Any]:
    """The file's `add` under `segment_id` (under column mapping the log keys the partition
    value by the column's physical name), everything else as it was."""
    add = file.add
    (key,) = add["partitionValues"]
    return {**add, "partitionValues": {key: segment_id}}


def _rewrite(
    rows: DataFrame, plan: MergePlan, small: list[LiveFile], handed: Handed = lambda rows: rows
) -> tuple[DataFrame, dict[str, str]]:
    """The small inputs' rows as the output segment's, in files of about the target size."""
    files = max(1, math.ceil(sum(f.size for f in small) / TARGET_FILE_BYTES))
    return handed(rows.withColumn(SEGMENT_COLUMN, F.lit(plan.output.id))).coalesce(files), {}


def _rows(add: Mapping[str, Any]) -> int:
    return int(json.loads(add.get("stats") or "{}").get("numRecords", 0))

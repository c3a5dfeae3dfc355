"""Purging deleted rows: a segment's files rewritten without the rows deletion vectors hide.

Other writers' DELETE and UPDATE (an erasure request, a correction) mark rows deleted in
deletion vectors; every scan still reads the files and drops them. A purge rewrites exactly the
files of the segments that carry a vector, as Delta's `REORG TABLE ... APPLY (PURGE)` does: their
rows read with the vectors applied, written again into the same segments, and the old files
removed, in one commit with `dataChange=false` (streaming readers skip it), which the table's
history calls a REORG as it would Delta's. The rows are not re-sorted: each file's rows keep
their order.

The commit is direct (`DirectTransaction`), as a merge's is, so it is certified as a merge is
(`domain/certificate.py`): the rows read and the rows handed to Delta's writer are fingerprinted
in the write's own job, and the rows read must be those the log says the files show a reader
(each file's `numRecords` less its vector's cardinality), and the files written must hold as
many rows as were handed to the writer (their statistics). Otherwise nothing is committed
(`ContentMismatch`). The transaction reads the files, so a concurrent DELETE or merge that
touched them fails one of the two commits. On a table with row tracking the rows keep their row
ids and commit versions, and identity values are copied as they are.

A table the direct commit does not serve is purged by Delta's REORG itself, uncertified.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from compactor.delta.commit.transaction import USER_METADATA, DirectTransaction, segment_predicate
from compactor.delta.features import refused_features
from compactor.delta.log.commit_metadata import commit_metadata
from compactor.delta.log.live_files import LiveFileIndex, table_live_files
from compactor.delta.paths import SEGMENT_COLUMN, delta_table_sql, table_uri
from compactor.delta.predicates import in_list
from compactor.delta.rewrite.merge import codec_of
from compactor.delta.rewrite.one_commit import Produced, certificate_refusal, certified_write
from compactor.domain.certificate import Certificate
from compactor.domain.segments import Segment
from compactor.errors import ContentMismatch

OP = "purge"


def purge_deleted_rows(
    spark: SparkSession,
    warehouse: Path | str,
    segments: Sequence[Segment],
    live: LiveFileIndex | None = None,
    certify: bool = True,
) -> int | None:
    """Rewrite the files of one table's segments that carry deletion vectors, without the rows
    they hide, in one commit; its version (None: no file had a vector and nothing was committed,
    or Delta's REORG committed it on a table the direct commit does not serve).

    The commit's metadata records the segments with their hidden rows gone, so the catalog folds
    it like our other commits. `live`: the table's live files, kept by the caller (None: read
    afresh). `certify=False`: no certificate, no fingerprint computed.
    """
    tables = {s.table for s in segments}
    if len(tables) != 1:
        raise ValueError(f"a purge rewrites one table's segments, got tables {sorted(tables)}")
    table = tables.pop()
    uri = table_uri(warehouse, table)
    purged = [replace(s, deleted=0) for s in segments]
    live = live or table_live_files(spark, uri, table)
    txn = DirectTransaction.begin(spark, uri, live)
    if txn.fallback_reason() is not None or refused_features(txn.protocol, txn.metadata):
        _reorg(spark, uri, segments, commit_metadata(OP, purged, data_change=False))
        return None
    ids = [s.id for s in segments]
    files = [f for found in live.at(txn.read_version).of(ids).values() for f in found if f.vector]
    if not files:
        return None
    predicate = segment_predicate(ids)
    rows = txn.read(files, predicate)
    options = {"compression": codec_of(spark, files, uri)}
    certificate: Certificate | None = None
    if certify:
        adds, certificate = certified_write(txn, rows, lambda read, handed: (handed(read), options))
    else:
        adds = txn.write(rows, options)
    refused = certificate_refusal(Produced(adds, files, (), False, certificate=certificate))
    if refused is not None:
        raise ContentMismatch(f"table {table}: purge of {', '.join(ids)} not committed: {refused}")
    metadata = commit_metadata(OP, purged, data_change=False, certificate=certificate)
    return txn.commit(adds, files, False, metadata, ids, purge=True)


def _reorg(spark: SparkSession, uri: str, segments: Sequence[Segment], metadata: str) -> None:
    """Delta's own purge, for a table the direct commit does not serve: REORG commits as it
    writes, so it carries no certificate."""
    # a session of its own: the metadata must go with this command only, not with the merges
    # other threads commit through the job's session at the same time
    session = spark.newSession()
    session.conf.set(USER_METADATA, metadata)
    ids = in_list(s.id for s in segments)
    session.sql(f"REORG TABLE {delta_table_sql(uri)} WHERE `{SEGMENT_COLUMN}` IN ({ids}) APPLY (PURGE)")

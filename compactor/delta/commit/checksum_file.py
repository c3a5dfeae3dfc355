"""Version checksum files the job writes: for a commit Delta would miscount, and for a version
whose writer left none.

Delta keeps `_delta_log/<version>.crc` beside each commit: the table's file count and size,
its protocol and metadata, a histogram of file sizes. Readers take the protocol and metadata
from it instead of replaying the log, and each commit derives its checksum from the previous
one. A commit that adds a file the table already holds (a promotion moves a file into another
segment) would be counted as one more file; Delta then needs the whole state to compute it.

The job knows exactly what such a commit did: the files it wrote, the files it removed, and the
files it only moved (no change to the count or size). From the previous version's checksum it
writes the new one, keeping only the fields it can keep exact, and Delta's cached snapshot of
the table is dropped so that the next transaction reads it. Without a previous checksum, or
when another commit landed in between, none is written (Delta computes one when it needs it).

Writers such as delta-rs leave no checksum at all. A transaction that starts at such a version
replays the log for its protocol and metadata (a Spark job), and so does the snapshot after its
commit. The job's live files (`live_files`) hold everything a checksum of such a version says:
the files, the newest protocol and metadata, each application's transaction. Before it commits
to such a table, it writes the missing checksum, for tables whose state holds nothing more (no
domain metadata, in-commit timestamps or row ids). Delta checks every checksum against the
state it computes when it writes a checkpoint.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession

from compactor.delta.commit.plan_transactions import RETENTION_PROPERTY
from compactor.delta.features import features, table_config, table_flag
from compactor.delta.files import HadoopFiles, jvm_class
from compactor.delta.log.live_files import LiveFile, LiveFiles

# Fields a derived checksum keeps; the others (the list of every file, the histogram of deleted
# rows, the previous transaction's id) are optional and left out rather than guessed.
KEPT = (
    "tableSizeBytes",
    "numFiles",
    "numMetadata",
    "numProtocol",
    "setTransactions",
    "domainMetadata",
    "metadata",
    "protocol",
    "fileSizeHistogram",
    "numDeletedRecordsOpt",
    "numDeletionVectorsOpt",
)


def write_checksum_after(
    spark: SparkSession,
    path: str,
    read_version: int,
    version: int,
    added: Sequence[dict[str, Any]],
    removed: Sequence[LiveFile],
) -> bool:
    """Write `version`'s checksum from `read_version`'s (the transaction's): `added` are the
    `add` actions of new files, `removed` the files the commit removed (files it re-added under
    another segment change nothing). False when there was nothing to derive it from."""
    if version != read_version + 1:
        return False
    files = HadoopFiles(spark)
    log_uri = f"{path.rstrip('/')}/_delta_log"
    previous = files.read_text(f"{log_uri}/{read_version:020d}.crc")
    if previous is None:
        return False
    checksum = derive(json.loads(previous), added, removed)
    info = _commit_info(files, f"{log_uri}/{version:020d}.json")
    if "inCommitTimestamp" in info:
        checksum["inCommitTimestampOpt"] = info["inCommitTimestamp"]
    files.write_text(f"{log_uri}/{version:020d}.crc", json.dumps(checksum, separators=(",", ":")))
    forget_snapshot(spark, path)
    return True


def forget_snapshot(spark: SparkSession, path: str) -> None:
    """Drop Delta's cached snapshot of the table: one loaded before the job wrote its version's
    checksum has none in memory, and a commit after it would compute one from the whole state.
    The next transaction loads the table again (a listing), checksum included."""
    jvm: Any = spark._jvm
    hadoop_path = jvm_class(jvm, "org.apache.hadoop.fs.Path")(path)
    jvm_class(jvm, "org.apache.spark.sql.delta.DeltaLog").invalidateCache(spark._jsparkSession, hadoop_path)


# Features whose state a checksum of files, protocol, metadata and transactions describes whole.
DESCRIBED = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "vacuumProtocolCheck",
    }
)
# Delta lists a small table's files in its checksum (allFilesInCrc.thresholdNumFiles): the next
# commit derives its list from this one's, and a reader of a small table finds its files there
MAX_LISTED_FILES = 50


def write_missing_checksum(spark: SparkSession, files: HadoopFiles, log_uri: str, live: LiveFiles) -> bool:
    """Write the checksum of `live.version` when its writer left none and the job knows all it
    holds (see the module's text); True when written."""
    if live.protocol is None or live.metadata is None or live.domain_metadata:
        return False
    table_features = features(live.protocol)
    config = table_config(live.metadata)
    if table_features - DESCRIBED or table_flag(config, "delta.enableincommittimestamps"):
        return False
    target = f"{log_uri}/{live.version:020d}.crc"
    if files.exists(target):
        return False
    every = live.everything()
    checksum: dict[str, Any] = {
        "tableSizeBytes": sum(f.size for f in every),
        "numFiles": len(every),
        "numMetadata": 1,
        "numProtocol": 1,
        "metadata": live.metadata,
        "protocol": live.protocol,
        "domainMetadata": [],
    }
    if RETENTION_PROPERTY.lower() not in config and live.txns is not None:
        checksum["setTransactions"] = list(live.txns.values())
    if len(every) <= MAX_LISTED_FILES:
        checksum["allFiles"] = [{**f.add, "dataChange": False} for f in every]
    if "deletionVectors" in table_features:
        checksum["numDeletionVectorsOpt"] = sum(1 for f in every if f.vector)
        checksum["numDeletedRecordsOpt"] = sum(f.hidden for f in every)
    files.write_text(target, json.dumps(checksum, separators=(",", ":")))
    forget_snapshot(spark, log_uri.removesuffix("/_delta_log"))
    return True


def derive(
    previous: dict[str, Any], added: Sequence[dict[str, Any]], removed: Sequence[LiveFile]
) -> dict[str, Any]:
    """The checksum after a commit of `added` new files and `removed` ones (pure)."""
    checksum = {k: previous[k] for k in KEPT if k in previous}
    config = table_config(previous.get("metadata") or {})
    if RETENTION_PROPERTY.lower() in config:  # which transactions expired is Delta's to say
        checksum.pop("setTransactions", None)
    sizes_in = [int(a["size"]) for a in added]
    sizes_out = [f.size for f in removed]
    checksum["numFiles"] = int(previous["numFiles"]) + len(sizes_in) - len(sizes_out)
    checksum["tableSizeBytes"] = int(previous["tableSizeBytes"]) + sum(sizes_in) - sum(sizes_out)
    histogram = checksum.get("fileSizeHistogram")
    if histogram is not None:
        checksum["fileSizeHistogram"] = _histogram(histogram, sizes_in, sizes_out)
    vectors = [f for f in removed if f.hidden > 0]
    if checksum.get("numDeletionVectorsOpt") is not None:
        checksum["numDeletionVectorsOpt"] = int(checksum["numDeletionVectorsOpt"]) - len(vectors)
    if checksum.get("numDeletedRecordsOpt") is not None:
        checksum["numDeletedRecordsOpt"] = int(checksum["numDeletedRecordsOpt"]) - sum(
            f.hidden for f in vectors
        )
    return checksum


def _histogram(
    histogram: dict[str, Any], sizes_in: Sequence[int], sizes_out: Sequence[int]
) -> dict[str, Any]:
    """Delta's file size histogram with files added and removed: a file counts in the bin whose
    lower boundary is the largest at or below its size."""
    bounds = list(histogram["sortedBinBoundaries"])
    counts, totals = list(histogram["fileCounts"]), list(histogram["totalBytes"])
    for sizes, sign in ((sizes_in, 1), (sizes_out, -1)):
        for size in sizes:
            i = max(0, bisect.bisect_right(bounds, size) - 1)
            counts[i] += sign
            totals[i] += sign * size
    return {"sortedBinBoundaries": bounds, "fileCounts": counts, "totalBytes": totals}


def _commit_info(files: HadoopFiles, commit_uri: str) -> dict[str, Any]:
    text = files.read_text(commit_uri) or ""
    for line in text.splitlines():
        if line.strip():
            action = json.loads(line)
            if "commitInfo" in action:
                return dict(action["commitInfo"])
    return {}

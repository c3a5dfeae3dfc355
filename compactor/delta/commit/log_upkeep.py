"""A table's log kept small off the merge path: checkpoints written by the job's maintainer.

Delta writes a checkpoint in the post-commit hook of whichever commit lands on a multiple of
`delta.checkpointInterval`, and a checkpoint needs the table's whole state: one merge in ten
paid for a replay of the log (20 of 202 merges in the latency benchmark). The job's own commits
leave that hook out (`without_inline_checkpoint`), and the maintainer writes the checkpoint
instead (`write_checkpoint`), on a thread of its own, when a table has more than its interval
of commits since the last one: whoever wrote them, the job or another writer (delta-rs leaves
checkpoints to others). Writing a checkpoint also runs Delta's log cleanup, so old commit files
go as the table's `delta.logRetentionDuration` says.

Log compaction files (`<x>.<y>.compacted.json`) are not written: delta-spark 4.4 reads them but
has no writer, and with a checkpoint at most `interval` commits behind, a reader replays at most
that many small JSON commits after it; a file of the job's own making in the log is not worth
so little.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from compactor.delta.files import HadoopFiles, jvm_class

CHECKPOINT_HOOK = "Post commit checkpoint trigger"  # CheckpointHook.name in delta-spark 4.4


def without_inline_checkpoint(txn: Any) -> bool:
    """Leave Delta's checkpoint hook out of this transaction's commit (the maintainer writes the
    checkpoint); True when it was there. The hook list is a protected member of Delta's
    `OptimisticTransaction`, reached through py4j as any public one: pinned to delta-spark 4.4
    and tested there."""
    hooks = txn.postCommitHooks()
    for i in range(hooks.size()):
        hook = hooks.apply(i)
        if hook.name() == CHECKPOINT_HOOK:
            hooks.subtractOne(hook)
            return True
    return False


def commits_since_checkpoint(files: HadoopFiles, log_uri: str, latest: int) -> tuple[int, int]:
    """(commits since the newest checkpoint, that checkpoint's version or -1), from
    `_last_checkpoint`: one small read, no listing."""
    text = files.read_text(f"{log_uri}/_last_checkpoint")
    checkpointed = int(json.loads(text)["version"]) if text else -1
    return max(0, latest - checkpointed), checkpointed


def write_checkpoint(spark: SparkSession, table_uri: str) -> int:
    """A checkpoint of the table's newest version, with Delta's own writer (and its log cleanup);
    the version checkpointed."""
    jvm: Any = spark._jvm
    delta_log = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, table_uri
    )
    option = jvm_class(jvm, "scala.Option")
    snapshot = delta_log.update(False, option.empty(), option.empty())
    delta_log.checkpoint(snapshot, option.empty())
    return int(snapshot.version())

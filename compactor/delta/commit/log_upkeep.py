"""A table's log kept small off the merge path: checkpoints written by the job's maintainer.

Delta writes a checkpoint in the post-commit hook of whichever commit lands on a multiple of
`delta.checkpointInterval`, and a checkpoint needs the table's whole state: one merge in ten
paid for a replay of the log (20 of 202 merges in the latency benchmark). The job's own commits
leave that hook out (`without_inline_checkpoint`), and the maintainer writes the checkpoint
instead (`write_checkpoint`), on a thread of its own, when a table has more than its interval
of commits since the last one: whoever wrote them, the job or another writer (delta-rs leaves
checkpoints to others). Writing a checkpoint also runs Delta's log cleanup, so old commit files
go as the table's `delta.logRetentionDuration` says.

One cost stays with a commit that lands on a multiple of the table's `delta.checkpointInterval`,
hook or no hook: delta-spark 4.4 decides inside the commit that a checkpoint is due and, for its
commit statistics, counts the table's files, which rebuilds the table's whole state
(`finalizeAndEmitCommitStats`). A table whose settings say `hold_checkpoint_interval` has that
property raised to `HELD_INTERVAL` by the maintainer (`hold_checkpoint_interval`), so that no
commit lands on one; the maintainer goes by the table's `checkpoint_every`, never by the property.

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
from compactor.delta.log.snapshot import newest_snapshot, table_property
from compactor.delta.paths import delta_table_sql, sql_string
from compactor.delta.sessions import active_session

CHECKPOINT_HOOK = "Post commit checkpoint trigger"  # CheckpointHook.name in delta-spark 4.4
INTERVAL_PROPERTY = "delta.checkpointInterval"
# the interval of a table whose checkpoints the job holds: no commit of a table's lifetime reaches
# a multiple of it in practice, and an operator reading the property recognises the value
HELD_INTERVAL = 1_000_000
# Delta's switch that makes a failed checkpoint raise instead of logging a warning
THROW_ON_FAILURE = "spark.databricks.delta.checkpoint.exceptionThrowing.enabled"


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
    the version checkpointed. Delta's writer logs a failure as a warning and returns as if it had
    written (a checkpoint is a commit's afterthought to it): here the checkpoint is the whole
    job, so a failure raises, and the maintainer tries again in its next round."""
    with active_session(spark, {THROW_ON_FAILURE: "true"}):
        delta_log, snapshot = newest_snapshot(spark, table_uri)
        delta_log.checkpoint(snapshot, jvm_class(spark._jvm, "scala.Option").empty())
    return int(snapshot.version())


def hold_checkpoint_interval(spark: SparkSession, table_uri: str, held: bool) -> bool:
    """Raise the table's `delta.checkpointInterval` to `HELD_INTERVAL` (`held`), or give a held
    one back to Delta's default (the property unset); True when the table was changed. A
    property the user set to another value is left alone when giving back."""
    current = table_property(spark, table_uri, INTERVAL_PROPERTY)
    table, name = delta_table_sql(table_uri), sql_string(INTERVAL_PROPERTY)
    if held and current != str(HELD_INTERVAL):
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({name} = {sql_string(str(HELD_INTERVAL))})")
        return True
    if not held and current == str(HELD_INTERVAL):
        spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ({name})")
        return True
    return False

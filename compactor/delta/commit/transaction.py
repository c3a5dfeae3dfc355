"""A direct commit: one Delta transaction of the job's own writer, over files the job names.

Delta's generic overwrite (`replaceWhere`) lists the table's files to find what it replaces,
and that listing rebuilds the table's whole state after any other writer's commit: three Spark
jobs, most of a small merge's cost. The job already knows its inputs' files (`live_files`), so a
merge commits the way Delta's OPTIMIZE does, through delta-spark's own transaction:

- `DeltaLog.startTransaction()` reads the log's listing and the newest checksum, nothing more;
- the inputs are read through a file index over exactly their `add` actions (deletion vectors
  honoured), and `trackFilesRead` plus a partition-only read predicate tell Delta's conflict
  checker what the commit depends on: a concurrent writer that removed one of them (a DELETE,
  another engine's OPTIMIZE) or, for a commit that changes data, added a file the predicate
  matches, makes the commit fail;
- `writeFiles` writes the output with full statistics (or, for an output of one partition on a
  table of plain files, the same file writer writes it as that partition, `partition_write`);
  the commit removes the inputs' files and adds the output's, with `dataChange=false` unless
  rows changed (upsert compaction).

The commit goes through the same JVM, `LogStore` and file systems as every other write of the
job, so the S3 single-driver lock and the HDFS and GCS semantics are Delta's own.

Delta writes a checksum (`<version>.crc`) after a commit, derived from the previous version's
when that one has a checksum; when it has none (a writer such as delta-rs leaves none), the
derivation would rebuild the table's state. Such a commit is made with checksums off, as the
writer before it was.

A loader's commit landing between the read and the commit is the common race on a table loaded
while it is merged (16% of the merges of the years benchmark). Delta's own retry commits on top
of it, but the version below its commit then has no checksum: Delta rebuilds the table's state
twice inside the commit (its protocol and metadata for the new snapshot, all of it for the
checksum), a Spark job of seconds where the merge took a fraction of one. So a commit that
changes no data is tried alone first (`maxCommitAttempts` 0) and, when its version is taken,
`restart`s: a fresh transaction at the newest version (its checksum written first, as `begin`
does), the files read confirmed live there with the same actions and the protocol and metadata
unchanged (else `CommitConflict`, as Delta's checker would say), then the same actions again.
Only a commit that changes data (its validity depends on what other writers added) and the last
try leave the race to Delta's retry and its conflict checker.

A table with row tracking keeps each row's stable id and commit version through the rewrite as
Delta's OPTIMIZE keeps them (`RowTracking.preserveRowTrackingColumns`): `read` adds the
materialised columns the table's configuration names, holding `_metadata.row_id` and
`_metadata.row_commit_version`, and the writer stores them in the new files. `commit` goes
through `OptimisticTransaction.commit`, which gives every added file lacking them a fresh
`baseRowId` above the table's high-water mark, raises the mark (domain metadata
`delta.rowTracking`) and sets `defaultRowCommitVersion` to the commit's version; a file re-added
as it was (a promotion) keeps its own. The commit says `delta.rowTracking.preserved`, as
OPTIMIZE's does. Identity columns need nothing: the transaction's writer keeps the values it is
given and tracks no high-water mark for them.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from compactor.delta.commit.action_seq import action_seq, removal
from compactor.delta.commit.checksum_file import write_missing_checksum
from compactor.delta.commit.conflicts import conflicts_as_commit_conflict
from compactor.delta.commit.footer_stats import footer_stats
from compactor.delta.commit.footer_stats import refusal as footer_stats_refusal
from compactor.delta.commit.log_upkeep import without_inline_checkpoint
from compactor.delta.commit.partition_write import refusal as partition_write_refusal
from compactor.delta.commit.partition_write import session_conf, write_one_partition
from compactor.delta.features import direct_commit_refusal, refused_features, row_tracking_columns
from compactor.delta.files import HadoopFiles, jvm_class, scala_items, scala_map, scala_none, scala_seq
from compactor.delta.log.live_files import LiveFile, LiveFileIndex
from compactor.delta.log.reader import CommitFacts
from compactor.delta.log.reads import committed
from compactor.delta.paths import SEGMENT_COLUMN, data_file_uri
from compactor.delta.predicates import in_list
from compactor.delta.sessions import active_session
from compactor.domain.plans import MergePlan
from compactor.errors import CommitConflict, StalePlan, UnsupportedTableFeature

log = logging.getLogger(__name__)

WRITE_CHECKSUM = "spark.databricks.delta.writeChecksumFile.enabled"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"  # a SQL command's, from the session
INCREMENTAL_CHECKSUM = "spark.databricks.delta.incremental.commit.enabled"
MAX_COMMIT_ATTEMPTS = "spark.databricks.delta.maxCommitAttempts"
COLLECT_STATS = "spark.databricks.delta.stats.collect"
# the job's switch for statistics read from written files' footers (`footer_stats`), on by default
STATS_FROM_FOOTERS = "spark.compactor.statsFromFooters"
VERSION_TAKEN = "DELTA_MAX_COMMIT_RETRIES_EXCEEDED"  # a lone attempt found its version taken
RESTARTS = 3  # fresh transactions a lone commit tries before Delta's own retry takes the race
# the write metrics a restarted transaction carries over, for the commit's operation metrics
WRITE_METRICS = ("numFiles", "numOutputBytes", "numOutputRows", "numParts")
_NAMED: set[str] = set()  # tables whose commit path the log has named
_NAMED_LOCK = threading.Lock()
# what Delta names the reads of a rewrite's inputs (its OPTIMIZE's action type)
READ_ACTION_TYPE = "Optimize"
# the commit tag saying every copied row kept its stable row id and commit version (PROTOCOL.md)
PRESERVED_ROW_TRACKING = "delta.rowTracking.preserved"


class DirectTransaction:
    """One transaction on a table: read named files, write new ones, commit both at once."""

    def __init__(self, spark: SparkSession, path: str, live: LiveFileIndex | None = None) -> None:
        self.spark = spark
        self.path = path
        self._jvm: Any = spark._jvm
        self._live = live  # the table's live files: a lone commit can restart (None: it cannot)
        self._delta_log = jvm_class(self._jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(
            spark._jsparkSession, path
        )
        self._start()
        self._tracked: list[tuple[Sequence[LiveFile], Column | None]] = []  # what `track` told Delta
        # the materialised row id and row commit version columns, when row tracking is enabled
        self.row_tracking: tuple[str, str] | None = row_tracking_columns(self.protocol, self.metadata)

    def _start(self) -> None:
        """Delta's transaction at the table's newest version, with its protocol and metadata."""
        self.txn = self._delta_log.startTransaction()
        self.read_version = int(self.txn.readVersion())
        self.protocol: dict[str, Any] = json.loads(self.txn.protocol().json())["protocol"]
        self.metadata: dict[str, Any] = json.loads(self.txn.metadata().json())["metaData"]

    @classmethod
    def begin(cls, spark: SparkSession, path: str, live: LiveFileIndex) -> DirectTransaction:
        """A transaction at the table's newest version, its checksum written first when its
        writer left none (`checksum_file`: else the transaction would replay the log for it)."""
        _checksum_newest(spark, live)
        return cls(spark, path, live)

    def check_rewritable(self) -> None:
        """`UnsupportedTableFeature` for a table whose features no rewrite of ours preserves."""
        refused = refused_features(self.protocol, self.metadata)
        if refused:
            raise UnsupportedTableFeature(f"table at {self.path}: " + "; ".join(refused))

    def fallback_reason(self) -> str | None:
        """Why this table's commits take Delta's generic overwrite instead (None: they need not);
        said in the log once per table and process."""
        reason = direct_commit_refusal(self.protocol)
        with _NAMED_LOCK:
            named = self.path in _NAMED
            _NAMED.add(self.path)
        if reason is not None and not named:
            log.info("table at %s: merges commit through Delta's generic overwrite: %s", self.path, reason)
        return reason

    def read(self, files: Sequence[LiveFile], predicate: Column | None) -> DataFrame:
        """The rows of `files` (deletion vectors applied), as Delta's OPTIMIZE reads a bin,
        recorded as read by the transaction (`track`); with row tracking, each row's id and
        commit version in the materialised columns (`row_tracking`), for `write` to keep."""
        frame = self._frame(files)
        self._track(files, predicate)
        if self.row_tracking is None:
            return frame
        tracking = jvm_class(self._jvm, "org.apache.spark.sql.delta.RowTracking")
        return DataFrame(tracking.preserveRowTrackingColumns(frame._jdf, self.txn.snapshot()), self.spark)

    def track(self, files: Sequence[LiveFile], predicate: Column | None) -> None:
        """Tell Delta's conflict checker the commit depends on `files` and on `predicate` (a
        partition predicate; None: the whole table was read)."""
        self._track(files, predicate)

    def _frame(self, files: Sequence[LiveFile]) -> DataFrame:
        option = jvm_class(self._jvm, "scala.Option")
        relation = self._delta_log.createDataFrame(
            self.txn.snapshot(),
            self._adds(files),
            False,
            option.apply(READ_ACTION_TYPE),
        )
        return DataFrame(relation, self.spark)

    def _track(self, files: Sequence[LiveFile], predicate: Column | None) -> None:
        self._tracked.append((files, predicate))
        self.txn.trackFilesRead(self._adds(files))
        condition = self._catalyst(predicate if predicate is not None else F.lit(True))
        self.txn.trackReadPredicates(scala_seq(self._jvm, [condition]), predicate is not None, True)

    def _catalyst(self, predicate: Column) -> Any:
        """`predicate` (over the table's partition columns) as Catalyst's resolved expression,
        analysed against an empty relation of those columns: analysed against the table's own
        relation, it cost a small merge more than the rest of `track`."""
        relation = _partition_relation(
            self.spark, self.metadata["schemaString"], *self.metadata["partitionColumns"]
        )
        return relation.where(predicate)._jdf.queryExecution().analyzed().condition()

    def write(
        self, data: DataFrame, options: dict[str, str], into: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Write `data` as new files of the table (Delta's `maxRecordsPerFile` and `compression`
        options apply); their `add` actions, statistics included, as the log would write them.
        Where the table allows (`footer_stats`), Delta's per-row collection is off and each
        file's statistics are read from its Parquet footer. `into`: the partition values every
        row of `data` has, to write it as that one partition (`partition_write`) where the
        table allows."""
        jvm = self._jvm
        from_footers = self.footer_stats_refusal() is None
        adds = None
        if (
            from_footers
            and into is not None
            and partition_write_refusal(self.protocol, self.metadata, into, session_conf(self.spark)) is None
        ):
            adds = write_one_partition(self.spark, self.txn, data, options, into, self.metadata)
        if adds is None:
            delta_options = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaOptions")(
                scala_map(jvm, options), self.spark._jsparkSession.sessionState().conf()
            )
            option = jvm_class(jvm, "scala.Option")
            with active_session(self.spark, {COLLECT_STATS: "false"} if from_footers else None):
                written = self.txn.writeFiles(
                    data._jdf, option.apply(delta_options), True, scala_seq(jvm, [])
                )
            actions = [json.loads(action.json()) for action in scala_items(jvm, written)]
            adds = [a["add"] for a in actions if "add" in a]
        if from_footers:
            files = self._live.files if self._live is not None else HadoopFiles(self.spark)
            for add in adds:
                footer = files.parquet_footer(data_file_uri(self.path, add["path"]), int(add["size"]))
                add["stats"] = footer_stats(footer, self.protocol, self.metadata)
            adds = [a for a in adds if json.loads(a["stats"])["numRecords"] > 0]  # as Delta drops them
        return adds

    def footer_stats_refusal(self) -> str | None:
        """Why this table's written files take Delta's statistics collection (None: their
        footers give the same statistics for less; `STATS_FROM_FOOTERS` turns them off)."""
        conf = self.spark.conf
        if str(conf.get(STATS_FROM_FOOTERS, "true")).lower() != "true":
            return f"{STATS_FROM_FOOTERS} is off"
        if str(conf.get(COLLECT_STATS, "true")).lower() != "true":
            return "Delta's statistics collection is off"
        zone = str(conf.get("spark.sql.session.timeZone", "UTC"))
        return footer_stats_refusal(self.protocol, self.metadata, zone)

    def count_written(self, adds: Sequence[dict[str, Any]], rows: int) -> None:
        """Report files written outside `write` (by the driver) in the commit's operation
        metrics, as Spark's writer reports its own: files, bytes and rows out."""
        jvm = self._jvm
        metrics = jvm_class(jvm, "org.apache.spark.sql.execution.metric.SQLMetrics")
        values = {
            "numFiles": len(adds),
            "numOutputBytes": sum(int(a["size"]) for a in adds),
            "numOutputRows": rows,
        }
        registered, context = {}, self.spark._jsc.sc()
        for name, value in values.items():
            metric = metrics.createMetric(context, name)
            metric.set(value)
            registered[name] = metric
        self.txn.registerSQLMetrics(self.spark._jsparkSession, scala_map(jvm, registered))

    def written_rows(self) -> int | None:
        """Rows the transaction's writes wrote, from Delta's write metrics (None: not counted)."""
        metric = self.txn.getMetric("numOutputRows")
        return int(metric.get().value()) if metric.isDefined() else None

    def commit(
        self,
        adds: Sequence[dict[str, Any]],
        removes: Sequence[LiveFile],
        data_change: bool,
        user_metadata: str,
        replaced: Sequence[str],
        keep_checksum: bool = True,
        purge: bool = False,
    ) -> int:
        """Commit the `adds` and the removal of `removes` in one version; its number.

        `replaced`: the segment ids the commit replaces, named in its history as the predicate
        of an overwrite. `keep_checksum=False`: the commit's actions would mislead Delta's
        incremental checksum (a file added again under another segment), so none is written.
        `purge`: the files were rewritten without their deleted rows, recorded in the history as
        Delta's own purge (`REORG ... APPLY (PURGE)`) is. Delta's conflicts become `CommitConflict`.
        """
        now = int(time.time() * 1000)
        added = action_seq(self._jvm, "add", [{**a, "dataChange": data_change} for a in adds])
        removed = action_seq(self._jvm, "remove", [removal(f.add, now, data_change) for f in removes])
        operations = jvm_class(self._jvm, "org.apache.spark.sql.delta.DeltaOperations")
        option = jvm_class(self._jvm, "scala.Option")
        if purge:  # Delta takes its userMetadata from the session's configuration
            operation = operations.Reorg(
                scala_seq(self._jvm, [self._catalyst(segment_predicate(replaced))]), True
            )
        else:
            operation = operations.Write(
                jvm_class(self._jvm, "org.apache.spark.sql.SaveMode").Overwrite,
                option.apply(scala_seq(self._jvm, [SEGMENT_COLUMN])),
                option.apply(f"{SEGMENT_COLUMN} IN ({in_list(replaced)})"),
                option.apply(user_metadata),
                scala_none(self._jvm),
                scala_none(self._jvm),
                scala_none(self._jvm),
                scala_none(self._jvm),
                scala_none(self._jvm),
            )
        tags = {PRESERVED_ROW_TRACKING: "true"} if self.row_tracking is not None else {}
        scala_tags = scala_map(self._jvm, tags)
        actions = added.appendedAll(removed)
        restartable = not data_change and self._live is not None
        for restart in range(RESTARTS + 1):
            alone = restartable and restart < RESTARTS
            checksum = keep_checksum and bool(self.txn.snapshot().checksumOpt().isDefined())
            settings = {} if checksum else {WRITE_CHECKSUM: "false", INCREMENTAL_CHECKSUM: "false"}
            if purge:
                settings[USER_METADATA] = user_metadata
            if alone:
                settings[MAX_COMMIT_ATTEMPTS] = "0"
            without_inline_checkpoint(self.txn)  # the job's maintainer writes it, off the merge path
            try:
                with active_session(self.spark, settings), conflicts_as_commit_conflict():
                    return int(self.txn.commit(actions, operation, scala_tags))
            except Exception as exc:
                if not alone or VERSION_TAKEN not in str(exc):
                    raise
            self._restart()
        raise AssertionError("unreachable: the last try is Delta's own retry")

    def _restart(self) -> None:
        """A fresh transaction at the table's newest version for the same commit: what this one
        read must be live there with the same actions, and the protocol and metadata unchanged;
        `CommitConflict` (nothing committed) otherwise."""
        assert self._live is not None
        before, metrics = (self.protocol, self.metadata), self._write_metrics()
        _checksum_newest(self.spark, self._live)
        self._start()
        if (self.protocol, self.metadata) != before:
            raise CommitConflict(
                f"MetadataChanged: table at {self.path}: its protocol or schema changed by version "
                f"{self.read_version}, after the files were written"
            )
        tracked, self._tracked = self._tracked, []
        held = {f.path: f.action for f in self._live.at(self.read_version).everything()}
        for files, predicate in tracked:
            changed = sorted({f.segment for f in files if held.get(f.path) != f.action})
            if changed:
                raise CommitConflict(
                    f"ConcurrentDeleteRead: table at {self.path}: files read from segment(s) "
                    f"{changed} were removed or rewritten by version {self.read_version}"
                )
            self.track(files, predicate)
        if metrics:
            self.txn.registerSQLMetrics(self.spark._jsparkSession, scala_map(self._jvm, metrics))

    def _write_metrics(self) -> dict[str, Any]:
        found = {name: self.txn.getMetric(name) for name in WRITE_METRICS}
        return {name: metric.get() for name, metric in found.items() if metric.isDefined()}

    def _adds(self, files: Sequence[LiveFile]) -> Any:
        """The `add` actions of `files` as Delta's objects, in a Scala `Seq`."""
        return action_seq(self._jvm, "add", [f.add for f in files])


@functools.lru_cache(maxsize=64)
def _partition_relation(spark: SparkSession, schema: str, *partition_columns: str) -> DataFrame:
    """An empty relation of the table's partition columns (the segment's, as a string, when the
    schema names none), to resolve predicates over them."""
    fields = [f for f in StructType.fromJson(json.loads(schema)).fields if f.name in partition_columns]
    if not any(f.name == SEGMENT_COLUMN for f in fields):
        fields.append(StructField(SEGMENT_COLUMN, StringType()))
    return spark.createDataFrame([], StructType(fields))


def _checksum_newest(spark: SparkSession, live: LiveFileIndex) -> None:
    """The checksum of the table's newest version, written when its writer left none."""
    latest = live.log.latest_version()
    if latest >= 0:
        write_missing_checksum(spark, live.files, live.log.log_uri, live.at(latest))


def segment_predicate(segment_ids: Sequence[str]) -> Column:
    """The partition predicate a rewrite of these segments reads by: parsed from SQL text in one
    call to the JVM (`isin` makes a call for every id, 5% of a small merge's driver time)."""
    if not segment_ids:
        return F.lit(False)
    return F.expr(f"{SEGMENT_COLUMN} IN ({in_list(segment_ids)})")


def live_inputs(
    spark: SparkSession,
    txn: DirectTransaction,
    live: LiveFileIndex,
    plan: MergePlan,
    depth: int,
) -> dict[str, list[LiveFile]] | CommitFacts:
    """The plan's inputs' files live at the transaction's read version, by segment; or the
    plan's earlier commit, when its inputs are gone because it committed. `StalePlan` when an
    input is gone and the plan did not commit: someone else removed it (the catalog lags the
    table), so nothing may be committed on its behalf. An input the catalog knows as empty has
    no file and is not gone."""
    files = live.at(txn.read_version).of(plan.input_ids)
    gone = sorted(s.id for s in plan.inputs if s.id not in files and s.records != 0)
    if not gone:
        return files
    done = committed(spark, live.log, plan.plan_id, depth)
    if done is not None:
        return done
    raise StalePlan(f"{plan.table}: input(s) {gone} are no longer in the table at version {txn.read_version}")

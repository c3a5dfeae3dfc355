"""The sequence every rewrite follows (`rewrite_in_one_commit`), filled in by a step of the test's
own: what it produces is committed in one version with the plan's record and both phases timed;
a guard that raises leaves the table as it was; a replay hands the earlier commit to the step;
a step that committed through Delta's overwrite is returned as it is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from compactor.client.loader import sample_rows
from compactor.delta.commit.transaction import DirectTransaction, segment_predicate
from compactor.delta.log.live_files import LiveFile, LiveFileIndex
from compactor.delta.log.reader import CommitFacts
from compactor.delta.log.reads import read_commits
from compactor.delta.paths import SEGMENT_COLUMN, table_uri
from compactor.delta.rewrite.merge import output_size
from compactor.delta.rewrite.one_commit import Produced, rewrite_in_one_commit
from compactor.delta.table_ops.writes import write_segment
from compactor.dev.rows_checksum import rows_checksum
from compactor.domain.plans import Commit, MergePlan, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.errors import Fenced

pytestmark = pytest.mark.integration

DAY = datetime(2024, 3, 4, tzinfo=UTC)


@dataclass
class CopyStep:
    """Writes the inputs' rows as the output segment, unchanged: a rewrite at its plainest."""

    plan: MergePlan
    kind: str = "merge"
    replays: list[CommitFacts] = field(default_factory=list)

    def replayed(self, facts: CommitFacts) -> Commit:
        self.replays.append(facts)
        return Commit(facts.version, facts.added, facts.records, facts.bytes, 0, already_done=True)

    def produce(
        self,
        txn: DirectTransaction,
        live: LiveFileIndex,
        files: Mapping[str, list[LiveFile]],
        guard: Callable[[], None],
    ) -> Produced | Commit:
        inputs = [f for sid in self.plan.input_ids for f in files[sid]]
        rows = txn.read(inputs, segment_predicate(self.plan.input_ids))
        adds = txn.write(rows.withColumn(SEGMENT_COLUMN, F.lit(self.plan.output.id)).coalesce(1), {})
        records, size = output_size(adds, txn)
        output = replace(self.plan.output, records=records, bytes=size)
        return Produced(adds, inputs, (output,), data_change=False, layout="as read")


def load(spark: Any, warehouse: Path, n: int) -> Segment:
    start = DAY + timedelta(days=n)
    segment = Segment(f"d{n}", "t", TimeRange(start, start + timedelta(days=1)), loaded_at=start)
    return write_segment(
        spark, warehouse, segment, sample_rows(spark, start, start + timedelta(days=1), 30, seed=n)
    )


def test_what_the_step_produces_is_committed_once_and_timed(spark: Any, warehouse: Path) -> None:
    days = [load(spark, warehouse, n) for n in range(3)]
    path = table_uri(warehouse, "t")
    before = rows_checksum(spark.read.format("delta").load(path).drop(SEGMENT_COLUMN))
    plan = make_plan("t", "auto_merge", days, level="week")
    step = CopyStep(plan)

    commit = rewrite_in_one_commit(spark, warehouse, plan, 10, step)

    assert (commit.version, commit.records_out, commit.already_done) == (3, 90, False)
    assert (commit.data_change, commit.layout) == (False, "as read")
    assert commit.outputs[0].id == plan.output.id and commit.outputs[0].bytes == commit.bytes_out
    assert commit.write_ms is not None and commit.commit_ms is not None
    assert commit.write_ms + commit.commit_ms <= commit.duration_ms + 1
    table = spark.read.format("delta").load(path)
    assert rows_checksum(table.drop(SEGMENT_COLUMN)) == before
    assert [r[0] for r in table.select(SEGMENT_COLUMN).distinct().collect()] == [plan.output.id]
    record = read_commits(spark, warehouse, "t")[-1]
    assert (record.op, record.removed, record.data_change) == ("merge", plan.input_ids, False)

    again = rewrite_in_one_commit(spark, warehouse, plan, 10, step)
    assert again.already_done and again.version == commit.version, "a replay commits nothing"
    assert [f.version for f in step.replays] == [commit.version], "the step reports the earlier commit"


def test_a_guard_that_raises_commits_nothing(spark: Any, warehouse: Path) -> None:
    days = [load(spark, warehouse, n) for n in range(2)]
    path = table_uri(warehouse, "t")
    plan = make_plan("t", "auto_merge", days, level="week")

    def fenced() -> None:
        raise Fenced("the shard moved on")

    with pytest.raises(Fenced):
        rewrite_in_one_commit(spark, warehouse, plan, 10, CopyStep(plan), guard=fenced)

    assert DeltaTable.forPath(spark, path).history(1).collect()[0].version == 1, "no version was added"
    segments = {
        r[0] for r in spark.read.format("delta").load(path).select(SEGMENT_COLUMN).distinct().collect()
    }
    assert segments == {"d0", "d1"}


def test_a_commit_the_step_made_itself_is_returned_as_it_is(spark: Any, warehouse: Path) -> None:
    days = [load(spark, warehouse, n) for n in range(2)]
    plan = make_plan("t", "auto_merge", days, level="week")
    made = Commit(7, (), 0, 0, 5, layout="made by the step")

    class Overwrote(CopyStep):
        def produce(self, *args: Any) -> Produced | Commit:
            return made

    assert rewrite_in_one_commit(spark, warehouse, plan, 10, Overwrote(plan)) is made

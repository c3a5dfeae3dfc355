"""What Spark did for the job between two moments: jobs, tasks and Delta state rebuilds, counted
from the driver's own status store (kept with the UI off too), so a benchmark figure comes with
the work that explains it, and a test can say what a merge may cost.

- **merge jobs**: jobs submitted under a merge's job group (`compactor-merge-<plan>`, set by the
  store for every commit it runs), with their tasks;
- **state rebuilds**: Delta computing a snapshot's whole state (its jobs are described
  "Compute snapshot for version: N"; one rebuild runs several jobs), wherever it happened:
  in a merge, after a checkpoint, in a read;
- **other jobs**: everything else (micro-batches, the catalog, reads).

The store keeps `spark.ui.retainedJobs` jobs (1,000 by default): a run that counts many sets
it higher (`RETAIN`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from compactor.delta.files import scala_items
from compactor.delta.spark_store import MERGE_JOB_GROUP_PREFIX

RETAIN = {"spark.ui.retainedJobs": "1000000", "spark.ui.retainedStages": "1000000"}
_REBUILD = re.compile(r"Compute snapshot for version: (\d+)")


@dataclass(frozen=True)
class Job:
    job_id: int
    group: str | None
    description: str | None
    tasks: int


def jobs(spark: Any) -> list[Job]:
    """Every job the driver's status store holds, oldest first."""
    store = spark._jsc.sc().statusStore()
    found = []
    for j in scala_items(spark._jvm, store.jobsList(None)):
        group, description = j.jobGroup(), j.description()
        found.append(
            Job(
                int(j.jobId()),
                str(group.get()) if group.isDefined() else None,
                str(description.get()) if description.isDefined() else None,
                int(j.numTasks()),
            )
        )
    return sorted(found, key=lambda job: job.job_id)


class SparkWork:
    """Counts the jobs run after it was made: `summary(merges)` gives them per merge."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.first = max((j.job_id for j in jobs(spark)), default=-1) + 1

    def since(self) -> list[Job]:
        return [j for j in jobs(self.spark) if j.job_id >= self.first]

    def summary(self, merges: int) -> dict[str, Any]:
        ran = self.since()
        merge_jobs = [j for j in ran if (j.group or "").startswith(MERGE_JOB_GROUP_PREFIX)]
        rebuilds = {
            (j.group, m.group(1)) for j in ran if j.description and (m := _REBUILD.search(j.description))
        }
        in_merges = {r for r in rebuilds if (r[0] or "").startswith(MERGE_JOB_GROUP_PREFIX)}
        per = max(1, merges)
        return {
            "jobs": len(ran),
            "merge_jobs": len(merge_jobs),
            "merge_tasks": sum(j.tasks for j in merge_jobs),
            "state_rebuilds": len(rebuilds),
            "state_rebuilds_in_merges": len(in_merges),
            "jobs_per_merge": len(merge_jobs) / per,
            "tasks_per_merge": sum(j.tasks for j in merge_jobs) / per,
            "state_rebuilds_per_merge": len(in_merges) / per,
            "other_jobs": len(ran) - len(merge_jobs),
        }


def describe(work: dict[str, Any]) -> str:
    """One line: the per-merge counts and where the rest went."""
    return (
        f"{work['jobs_per_merge']:.2f} Spark jobs and {work['tasks_per_merge']:.2f} tasks per merge, "
        f"{work['state_rebuilds_per_merge']:.2f} state rebuilds per merge "
        f"({work['state_rebuilds']} in all, checkpoints and reads included); {work['other_jobs']} other jobs"
    )

"""Named fault-injection points for crash tests; inert unless the environment enables one.

`COMPACTOR_FAULT_POINT=<name>` makes the process SIGKILL itself the first time it
reaches that point: no cleanup, no flush, exactly like a machine dying there.
`COMPACTOR_HANG` hangs a table's merges (`hang_point`), for the benchmark that must see
hung merges cancelled while the job runs on.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger(__name__)

FAULT_ENV = "COMPACTOR_FAULT_POINT"
AFTER_PLANNING = "after_planning"
AFTER_COMMIT = "after_commit"
AFTER_BOOKKEEPING = "after_bookkeeping"
BETWEEN_EMITS = "between_emits"
POINTS = (AFTER_PLANNING, AFTER_COMMIT, AFTER_BOOKKEEPING, BETWEEN_EMITS)
# a merge has committed, its worker not reported yet, and other merges are in flight
WITH_MERGES_IN_FLIGHT = "with_merges_in_flight"


def fault_point(name: str, when: bool = True) -> None:
    """Die here if the environment names this point and `when` holds (a no-op in production)."""
    if when and os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


# `COMPACTOR_HANG=<table>:<driver|task>[:<seconds>[:<every>]][,...]` hangs merges of `<table>`, for the
# benchmarks that must see a hung merge cancelled (bench/years.py): `driver` sleeps on the merge's worker
# thread before its commit, where nothing can interrupt it; `task` runs a Spark job in the merge's job
# group whose one task sleeps, which cancelling the merge interrupts. Each hangs `seconds` (3600 unless
# given): on the table's `every`-th merge in the process, its 2 x `every`-th, ... (so that one succeeds
# between two hangs and a restart does not hang it again at once); without `every`, on its first only.
HANG_ENV = "COMPACTOR_HANG"
HANG_KINDS = ("driver", "task")
_hang_lock = threading.Lock()
_hang_counts: dict[tuple[str, str], int] = {}


def hang_point(table: str, plan_id: str) -> None:
    """Hang here as `COMPACTOR_HANG` asks for this table's merge (a no-op when it is unset)."""
    spec = os.environ.get(HANG_ENV)
    if not spec:
        return
    for entry in spec.split(","):
        name, kind, seconds, every = _hang_entry(entry)
        if name != table or not _hang_due(name, kind, every):
            continue
        log.warning("%s=%s: merge %s of table %s hangs %ss", HANG_ENV, entry, plan_id, table, seconds)
        if kind == "driver":
            time.sleep(seconds)
        else:
            _sleeping_task(plan_id, seconds)


def _hang_entry(entry: str) -> tuple[str, str, float, int]:
    """(table, kind, seconds, every) of one `COMPACTOR_HANG` entry."""
    name, kind, seconds, every = [*entry.strip().split(":"), "", "", ""][:4]
    kind = kind or "driver"
    if kind not in HANG_KINDS:
        raise ValueError(f"{HANG_ENV}: {entry!r}: the kind is one of {HANG_KINDS}")
    return name, kind, float(seconds or 3600), int(every or 0)


def _hang_due(table: str, kind: str, every: int) -> bool:
    with _hang_lock:
        n = _hang_counts.get((table, kind), 0)
        _hang_counts[table, kind] = n + 1
    return (n + 1) % every == 0 if every > 0 else n == 0


def _sleeping_task(plan_id: str, seconds: float) -> None:
    """One Spark task that sleeps, in the merge's job group: cancelling the merge interrupts it
    (`Thread.sleep` through `java_method`, no Python worker)."""
    from pyspark.sql import SparkSession

    from compactor.delta.spark_store import INTERRUPT_PROPERTY, JOB_GROUP_PROPERTY, MERGE_JOB_GROUP_PREFIX

    spark = SparkSession.builder.getOrCreate()
    context = spark.sparkContext
    kept = {key: context.getLocalProperty(key) for key in (JOB_GROUP_PROPERTY, INTERRUPT_PROPERTY)}
    context.setLocalProperty(JOB_GROUP_PROPERTY, MERGE_JOB_GROUP_PREFIX + plan_id)
    context.setLocalProperty(INTERRUPT_PROPERTY, "true")
    try:
        spark.range(1, numPartitions=1).selectExpr(
            f"java_method('java.lang.Thread', 'sleep', bigint({int(seconds * 1000)}))"
        ).collect()
    finally:
        for key, value in kept.items():
            context.setLocalProperty(key, value)  # type: ignore[arg-type]

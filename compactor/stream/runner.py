"""The runner: one plan to one commit, with retries on conflicts, re-planning and a cool-down.

Per plan: the commit (retried with backoff while another writer wins the race
and the inputs are still there), on a worker thread; then, on the thread that
holds the job's state, the catalog update. A plan whose inputs changed under it
is stale: it is reported SKIPPED and the caller re-plans. A plan that fails is
reported FAILED and cools down, so one broken plan does not fail again on every
event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from compactor.catalog.changes import PlanApplied
from compactor.catalog.fold import SegmentCatalog
from compactor.config.rules import RuleName
from compactor.config.tables import TableSettings
from compactor.delta.store import LoadOrder, TableStore
from compactor.domain.certificate import IndexedWinners
from compactor.domain.events import MergeResult, MergeStatus
from compactor.domain.plans import Commit, MergePlan
from compactor.domain.segments import Segment
from compactor.errors import CommitConflict, ContentMismatch, Fenced, MergeCancelled, StalePlan
from compactor.stream.cool_down import CoolDown
from compactor.stream.faults import AFTER_BOOKKEEPING, AFTER_COMMIT, AFTER_PLANNING, fault_point, hang_point
from compactor.stream.merging.workers import Finished
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.stats import MergeCounts
from compactor.stream.table_configs import TableConfigs
from compactor.stream.table_failures import (
    TableFailures,
    config_fingerprint,
    quarantine_error,
    quarantine_note,
    short_error,
)

__all__ = ["RetryPolicy", "RunOutcome", "Runner", "config_fingerprint", "quarantine_error", "quarantine_note"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded exponential backoff for commit conflicts."""

    attempts: int = 5
    first_wait: float = 0.2  # seconds, doubling
    max_wait: float = 5.0

    def retrying(
        self, sleep: Callable[[float], None], before_sleep: Callable[[RetryCallState], None] | None = None
    ) -> Retrying:
        """Tenacity's loop: retry on `CommitConflict` within this policy, then re-raise."""
        return Retrying(
            retry=retry_if_exception_type(CommitConflict),
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.first_wait, max=self.max_wait),
            before_sleep=before_sleep,
            reraise=True,
            sleep=sleep,
        )


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """A plan's result to announce, the segments it wrote, whether it went stale, and whether
    its table was quarantined when it was recorded (`merging.Recorded`)."""

    result: MergeResult
    outputs: tuple[Segment, ...] = ()
    stale: bool = False
    held: bool = False


# A merge writes about its inputs' bytes again before the old files can go (VACUUM, later).
SPACE_FACTOR = 1.1
SPACE_MARGIN = 64 * 1024 * 1024
INSUFFICIENT_SPACE = "insufficient_space"


class Runner:
    """Per plan: `execute` on a worker (the commit, its retries, nothing shared written), then
    `record` on the thread that holds the job's state (the catalog, counters, cool-downs)."""

    def __init__(
        self,
        store: TableStore,
        catalog: SegmentCatalog,
        configs: TableConfigs,
        clock: Callable[[], datetime],
        cool_down: CoolDown,
        metrics: MetricsSink | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        failures: TableFailures | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog  # what each merge did is recorded in it
        self.configs = configs
        self.clock = clock
        self.cool_down = cool_down
        self.metrics = metrics or NoMetrics()
        self.failures = failures or TableFailures(cool_down, catalog, configs, self.metrics)
        self.counts = MergeCounts()
        self.retry = retry or RetryPolicy()
        self.sleep = sleep

    def execute(
        self,
        plan: MergePlan,
        settings: TableSettings,
        load_order: LoadOrder | None,
        winners: IndexedWinners | None = None,
    ) -> Finished:
        """Commit the plan; never raises for the plan's own failure. Safe on any thread: it
        reads only the store (and `load_order` and `winners`, taken when the plan started)."""
        fault_point(AFTER_PLANNING)
        short = self._space_short(plan)
        if short is not None:  # skipped, not failed: tried again after the cool-down
            return Finished(plan, skipped=short)
        lost = [0]
        try:
            with self.metrics.merging():
                hang_point(plan.table, plan.plan_id)  # COMPACTOR_HANG (bench/years.py); inert unless set
                commit = self._commit(plan, settings, load_order, winners, lost)
        except StalePlan as exc:
            return Finished(plan, stale=str(exc), conflicts=lost[0])
        except Exception as exc:  # the plan's failure, reported; never the job's
            return Finished(plan, failure=exc, conflicts=lost[0])
        fault_point(AFTER_COMMIT)
        return Finished(plan, commit=commit, conflicts=lost[0])

    def record(self, finished: Finished) -> RunOutcome:
        """What a finished plan did, into the catalog and counters: the result to announce."""
        plan, counts = finished.plan, self.counts
        counts.conflicts += finished.conflicts
        began = self.failures.ended(plan.plan_id)
        if finished.skipped is not None:
            log.warning(
                "plan %s: %s; tried again in %s", plan.plan_id, finished.skipped, self.cool_down.period
            )
            self.cool_down.start(plan.plan_id, plan.table, finished.skipped, plan.rule)
            return self._unsuccessful(plan, MergeStatus.SKIPPED, finished.skipped)
        if finished.stale is not None:
            log.warning("plan %s: %s; re-planning", plan.plan_id, finished.stale)
            counts.replans += 1
            return replace(self._unsuccessful(plan, MergeStatus.SKIPPED, finished.stale), stale=True)
        if finished.commit is None:
            return self._failed(plan, finished.failure, began)
        commit = finished.commit
        self.failures.succeeded(plan.table)
        self.catalog.apply(PlanApplied(plan, commit.outputs, commit.version, commit.data_change))
        fault_point(AFTER_BOOKKEEPING)
        if commit.already_done:
            counts.replayed_merges += 1
        else:
            counts.merges += 1
        log.info(
            "table %s: %s merged %s -> %s (%s) at version %d",
            plan.table,
            plan.rule,
            ",".join(plan.input_ids),
            ",".join(o.id for o in commit.outputs),
            plan.level or plan.pool or "-",
            commit.version,
        )
        upsert = plan.rule == RuleName.UPSERT_COMPACTION
        return RunOutcome(MergeResult.succeeded(plan, commit, self.clock(), upsert), commit.outputs)

    def _failed(self, plan: MergePlan, failure: BaseException | None, began: datetime | None) -> RunOutcome:
        """A failed plan: cooled down longer with each failure of its table in a row, and the
        table quarantined with this error once the streak reaches `quarantine_after`, unless the
        failure is part of an outage (`TableFailures`).

        A merge an operator cancelled cools down too (it comes back after its cool-down, as a
        hung one does), but it is no failure of the table: the streak does not grow and the
        table is never quarantined for it, so cancelling cannot quarantine a table."""
        error = failure or RuntimeError("the merge reported neither a commit nor a failure")
        if isinstance(error, Fenced):  # the shard's, not the table's: nothing to count or cool
            log.info(
                "plan %s of table %s: not committed (%s); its next holder plans it",
                plan.plan_id,
                plan.table,
                error,
            )
            return self._unsuccessful(plan, MergeStatus.SKIPPED, short_error(error))
        self.counts.failed_merges += 1
        if isinstance(error, MergeCancelled):
            self.counts.cancelled_merges += 1
            self.metrics.on_cancelled(plan.table)
            if error.by_operator:
                self.cool_down.start(plan.plan_id, plan.table, short_error(error), plan.rule)
                log.warning(
                    "plan %s of table %s %s; tried again after its cool-down", plan.plan_id, plan.table, error
                )
                return self._unsuccessful(plan, MergeStatus.FAILED, short_error(error))
        if isinstance(error, ContentMismatch):
            self.metrics.on_refused_certificate(plan.table)
            log.error("plan %s of table %s: refused before its commit: %s", plan.plan_id, plan.table, error)
        self.failures.failed(plan.table, plan.plan_id, error, plan.rule, f"plan {plan.plan_id}", began=began)
        return self._unsuccessful(plan, MergeStatus.FAILED, short_error(error))

    def _unsuccessful(self, plan: MergePlan, status: MergeStatus, why: str) -> RunOutcome:
        return RunOutcome(MergeResult.unsuccessful(plan, status, why, self.clock()))

    def _space_short(self, plan: MergePlan) -> str | None:
        """Why the plan's output would not fit where the table's files go (None: it fits, or unknown)."""
        free = self.store.free_bytes(plan.table)
        need = int(plan.bytes_in * SPACE_FACTOR) + SPACE_MARGIN
        if free is None or free >= need:
            return None
        return f"{INSUFFICIENT_SPACE}: the output needs about {need} bytes with its margin, {free} are free"

    def _commit(
        self,
        plan: MergePlan,
        settings: TableSettings,
        load_order: LoadOrder | None,
        winners: IndexedWinners | None,
        lost: list[int],
    ) -> Commit:
        """The store's commit, retried on conflicts while the plan's inputs are all still there."""
        for attempt in self.retry.retrying(self.sleep, self._conflict_lost(plan, lost)):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    present = self.store.segments_with_rows(plan.table, plan.input_ids)
                    gone = sorted(set(plan.input_ids) - present)
                    if gone:
                        raise StalePlan(f"inputs {gone} changed under the plan")
                return self.store.commit(plan, settings, load_order, winners)
        raise AssertionError("unreachable: tenacity returns or re-raises")

    def _conflict_lost(self, plan: MergePlan, lost: list[int]) -> Callable[[RetryCallState], None]:
        def count(state: RetryCallState) -> None:
            lost[0] += 1
            self.metrics.on_conflict(plan.table)
            log.warning("plan %s: Delta conflict, retry %d", plan.plan_id, state.attempt_number)

        return count

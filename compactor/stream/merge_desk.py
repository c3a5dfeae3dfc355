"""The stream's side of merge scheduling (`merging.MergeDesk`): each plan's settings and pool,
its commit for a worker, what it did recorded in the catalog, and its outcome announced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from compactor.catalog.view import CatalogView
from compactor.config.rules import RuleName
from compactor.delta.store import LoadOrder
from compactor.domain.events import MergeStatus
from compactor.domain.plans import MergePlan
from compactor.errors import ContentMismatch
from compactor.stream.announcer import Announcer
from compactor.stream.catalog_keeper import CatalogKeeper
from compactor.stream.faults import WITH_MERGES_IN_FLIGHT, fault_point
from compactor.stream.key_indexes import KeyIndexes
from compactor.stream.merging.workers import Finished
from compactor.stream.runner import Runner, RunOutcome
from compactor.stream.table_configs import TableConfigs


class StreamDesk:
    def __init__(
        self,
        runner: Runner,
        announcer: Announcer,
        keeper: CatalogKeeper,
        configs: TableConfigs,
        running: Callable[[], int],
        keys: KeyIndexes | None = None,
        certify: bool = True,
    ) -> None:
        self.runner = runner
        self.certify = certify  # the job-wide certify_merges, which a table's own overrides
        self.keys = keys  # upsert tables' key indexes: a merge's winners are checked against them
        self.announcer = announcer
        self.keeper = keeper
        self.configs = configs
        self.running = running  # merges in flight now (a fault point of the crash tests reads it)

    def pool(self, plan: MergePlan) -> str | None:
        return self.configs.for_table(plan.table).spark_pool(plan.rule, plan.pool)

    def job(self, plan: MergePlan) -> Callable[[], Finished]:
        """The plan's commit with the table's settings and, for an upsert table, its segments'
        load order (ties are broken by it) and what its key index says the inputs win (the
        certificate checks the merge against it), all taken now, on the thread that holds the
        catalog."""
        settings = self.configs.for_table(plan.table)
        upsert = settings.upsert
        order = load_order(self.runner.catalog, plan.table) if upsert is not None else None
        winners = None  # a refresh keeps every row: only a merge is checked against the index
        checked = settings.certifies(self.certify)  # no certificate, nothing to check the index's word with
        if upsert is not None and self.keys is not None and plan.rule != RuleName.REFRESH and checked:
            winners = self.keys.expected_winners(plan.table, plan.input_ids)

        def run() -> Finished:  # on a worker
            finished = self.runner.execute(plan, settings, order, winners)
            fault_point(WITH_MERGES_IN_FLIGHT, finished.commit is not None and self.running() > 1)
            return finished

        return run

    def started(self, plan: MergePlan) -> None:
        self.runner.failures.begun(plan)

    def record(self, finished: Finished) -> RunOutcome:
        """Into the catalog: a stale plan's table is checked against Delta before it is planned
        again; a table-wide rewrite's is checked when the batch saves."""
        plan = finished.plan
        if self.keys is not None and (
            isinstance(finished.failure, ContentMismatch)  # the winners check may be the index's fault
            or (plan.rule == RuleName.REFRESH and finished.commit is not None and finished.commit.data_change)
        ):  # a refresh that changed rows leaves the index's row hashes of them stale
            self.keys.distrust(plan.table)
        outcome = self.runner.record(finished)
        if outcome.stale:  # a concurrent writer changed the inputs
            self.keeper.check(plan.table)
        elif outcome.result.status is MergeStatus.SUCCEEDED and plan.table_wide:
            self.keeper.check_at_save(plan.table)
        return replace(outcome, held=self.runner.catalog.quarantined(plan.table) is not None)

    def announce(self, outcome: RunOutcome) -> None:
        self.announcer.announce(outcome)  # DeliveryError: kept first in line, and the batch fails

    def cancel(self, plan: MergePlan, why: str) -> None:
        self.runner.store.cancel(plan.plan_id)  # counted when its failure is recorded (`Runner`)


def load_order(catalog: CatalogView, table: str) -> LoadOrder:
    """When each live segment of the table was loaded (upsert tables break ties with it)."""
    return {s.id: s.loaded_at for s in catalog.segments(table)}

"""One account of a table's failures, whether its merge failed or its planning did.

Each failure cools its key down, longer with each failure of the table in a row; after
`quarantine_after` of them the table is quarantined with its last error, until its config
changes or an operator enables it. A failure that is part of an outage (`Outages`: many tables
failing alike) cools down but grows no streak, so an outage quarantines nothing.

"In a row" means tries, one after another: a merge that began before the table's last counted
failure was running beside it, not a try after it, so its failure cools down but grows no streak.
Merges of one table run side by side; three that hit one fault together (a store that stalled
them, a hang) would otherwise quarantine a healthy table at once, before any retry was made (the
years benchmark quarantined two tables so, each with three merges hung within eight seconds).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from datetime import datetime

from compactor.catalog.failures import BEGUN
from compactor.catalog.fold import SegmentCatalog
from compactor.config.tables import TableSettings
from compactor.domain.plans import MergePlan
from compactor.stream.cool_down import CoolDown
from compactor.stream.outages import Outage, Outages
from compactor.stream.reporting import MetricsSink
from compactor.stream.table_configs import TableConfigs

log = logging.getLogger(__name__)


class TableFailures:
    def __init__(
        self,
        cool_down: CoolDown,
        catalog: SegmentCatalog,
        configs: TableConfigs,
        metrics: MetricsSink,
        outages: Outages | None = None,
    ) -> None:
        self.cool_down = cool_down
        self.catalog = catalog  # quarantines are kept with each table's mark
        self.configs = configs
        self.metrics = metrics
        self.outages = outages
        self._began: dict[str, datetime] = {}  # plan id -> when it began, while it runs
        self._counted_at: dict[str, datetime] = {}  # table -> its last failure that grew its streak

    def begun(self, plan: MergePlan) -> None:
        self._began[plan.plan_id] = self.cool_down.clock()
        self.cool_down.begun(plan.plan_id, plan.table, plan.rule)

    def ended(self, plan_id: str) -> datetime | None:
        """A plan's run ended, whatever its outcome: when it began (None: not known)."""
        return self._began.pop(plan_id, None)

    def died_during(self, committed: Callable[[str, str], bool]) -> None:
        """At start: each table whose merge was running when the last run died counts that as a
        failure of its own (a merge that kills the job, again and again, ends in quarantine). A
        plan that `committed` (table, plan id) did not die: the job died after it, before saving."""
        for table, begun in sorted(self.cool_down.died_during.items()):
            plan_id = begun.key.removesuffix(BEGUN)
            if committed(table, plan_id):
                log.info("table %s: plan %s committed before the last run died; no failure", table, plan_id)
                self.cool_down.succeeded(table)
                continue
            error = JobDied(f"the job stopped while plan {plan_id} ran (killed, or out of memory?)")
            # counted, not cooled: a job killed with merges in flight plans them again at once
            self.failed(table, plan_id, error, begun.rule, f"plan {plan_id}", alone=True, cool=False)
        self.cool_down.died_during.clear()

    def failed(
        self,
        table: str,
        key: str,
        error: BaseException,
        rule: str | None,
        what: str,
        alone: bool = False,
        cool: bool = True,
        began: datetime | None = None,
    ) -> None:
        """`what` (a plan, the table's work) failed with `error`: cool `key` down, and grow the
        table's streak and quarantine it, unless an outage explains the failure (`alone`: it
        cannot be one's) or it `began` before the table's last counted failure (see the module).
        The first failure in a row is logged with its traceback, the rest in one line."""
        short = short_error(error)
        forgive = self.outages.failed(table, error) if self.outages is not None and not alone else None
        if forgive is not None:
            for other, count in forgive.items():
                self.cool_down.forgive(other, count)
            self.cool_down.start(key, table, short, rule)
            self.metrics.on_outage(
                self.outages.current.kind if self.outages and self.outages.current else None
            )
            log.warning("table %s: %s failed in an outage (%s); not counted against it", table, what, short)
            return
        counted = self._counted_at.get(table)
        if began is not None and counted is not None and began <= counted:
            self.cool_down.start(key, table, short, rule, cool=cool)
            log.warning(
                "table %s: %s failed, but it ran beside the failure counted at %s: not counted again (%s)",
                table,
                what,
                f"{counted:%H:%M:%S}",
                short,
            )
            return
        self.cool_down.start(key, table, short, rule, failed=True, cool=cool)
        self._counted_at[table] = self.cool_down.clock()
        streak = self.cool_down.streak(table)
        held = (
            self.cool_down.quarantines(table)
            and self.outages is not None
            and self.outages.suspected(table, error)
        )
        if held:
            log.warning(
                "table %s: %s failed (%d in a row), not quarantined yet: other tables fail alike and "
                "none has succeeded since (an outage?): %s",
                table,
                what,
                streak,
                short,
            )
            return
        if self.cool_down.quarantines(table):
            why = quarantine_note(short, config_fingerprint(self.configs.for_table(table)))
            if self.catalog.quarantine(table, why):
                self.metrics.on_quarantine(table)
                log.error(
                    "table %s quarantined after %d failures in a row (last: %s); no attempt until "
                    "its config changes or `compactor table enable %s`",
                    table,
                    streak,
                    short,
                    table,
                    exc_info=error,
                )
            return
        log.error(
            "%s failed (%d in a row for table %s); tried again after its cool-down%s",
            what,
            streak,
            table,
            "" if streak == 1 else f": {short}",
            exc_info=error if streak == 1 else None,
        )

    def outage(self) -> Outage | None:
        """The outage going on (None: none)."""
        return self.outages.current if self.outages is not None else None

    def paused(self) -> bool:
        """Attempts wait for an outage's pause to end."""
        return self.outages is not None and self.outages.paused()

    def outage_pause(self) -> datetime | None:
        """When the current outage's pause ends (None: attempts are not paused)."""
        if self.outages is None or self.outages.current is None or not self.outages.paused():
            return None
        return self.outages.current.paused_until

    def succeeded(self, table: str) -> None:
        self.cool_down.succeeded(table)
        self._counted_at.pop(table, None)
        if self.outages is not None:
            was = self.outages.current
            self.outages.succeeded(table)
            if was is not None:
                self.metrics.on_outage(None)


class JobDied(Exception):
    """A merge was running when the job died."""


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:2000] + "..."


def config_fingerprint(settings: TableSettings) -> str:
    """A short digest of a table's settings: a quarantine ends when it changes."""
    return hashlib.sha256(settings.model_dump_json().encode()).hexdigest()[:16]


def quarantine_note(error: str, fingerprint: str) -> str:
    """What a quarantined table's mark keeps: the error, and the config it failed under."""
    return json.dumps({"error": error, "config": fingerprint})


def quarantine_error(note: str) -> tuple[str, str | None]:
    """(error, config fingerprint) of a quarantine note."""
    try:
        doc = json.loads(note)
    except json.JSONDecodeError:
        return note, None
    return str(doc.get("error", note)), doc.get("config")

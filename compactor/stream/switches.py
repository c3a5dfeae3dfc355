"""Whether a table's work may run: the operator's merging switch, and quarantine (a table whose
merges kept failing), which a change of its config or the operator's `table enable` releases."""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum

from compactor.catalog.fold import SegmentCatalog
from compactor.errors import UnsupportedTableFeature
from compactor.stream.cool_down import CoolDown
from compactor.stream.reporting import MetricsSink, NoMetrics
from compactor.stream.table_configs import TableConfigs
from compactor.stream.table_failures import config_fingerprint, quarantine_error, quarantine_note
from compactor.stream.triggers import Trigger

log = logging.getLogger(__name__)


class Held(StrEnum):
    DISABLED = "disabled"  # an operator turned merging off
    QUARANTINED = "quarantined"


class TableSwitches:
    def __init__(
        self,
        catalog: SegmentCatalog,
        configs: TableConfigs,
        cool_down: CoolDown,
        refusal: Callable[[str], str | None] = lambda table: None,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.catalog = catalog  # the switches and quarantines are kept with each table's mark
        self.configs = configs
        self.cool_down = cool_down
        self.refusal = refusal  # why no merge may rewrite a table (its Delta features), or None
        self.metrics = metrics or NoMetrics()
        self._rewritable: set[str] = set()  # tables checked in this process: no feature refuses them

    def refused(self, table: str) -> bool:
        """Before a table's first merge in this process: a table whose Delta features no merge
        preserves (liquid clustering, append-only) is quarantined at once with why, in one line,
        instead of failing merge after merge (True). Checked again when a release lets it be
        tried; a table checked once costs nothing more."""
        if table in self._rewritable:
            return False
        why = self.refusal(table)
        if why is None:
            self._rewritable.add(table)
            return False
        note = quarantine_note(
            f"{UnsupportedTableFeature.__name__}: {why}", config_fingerprint(self.configs.for_table(table))
        )
        if self.catalog.quarantine(table, note):
            self.metrics.on_quarantine(table)
            log.error(
                "table %s is not compacted: %s. Leave it to Delta's OPTIMIZE (merge_enabled: false in "
                "its config silences this), or recreate it without that feature, partitioned by segment_id",
                table,
                why,
            )
        return True

    def flip(self, trigger: Trigger) -> bool:
        """Apply the merging switch the trigger carries (an operator's control event); True when
        that was all it asked for (merging turned off: queued and running merges still finish,
        as Hydrolix's merge does when turned off)."""
        if trigger.merging is None:
            return False
        table = trigger.table
        if self.catalog.switch_merging(table, trigger.merging):
            log.warning(
                "table %s: merging turned %s by an operator", table, "on" if trigger.merging else "off"
            )
        if trigger.merging and self.catalog.quarantine(table, None):
            self.cool_down.succeeded(table)
            log.warning("table %s: released from quarantine by an operator", table)
        return not trigger.merging

    def held(self, table: str) -> Held | None:
        """Why the table's work may not run now (None: it may). A quarantine whose table's
        config changed since is released first."""
        note = self.catalog.quarantined(table)
        if note is not None:
            _, fingerprint = quarantine_error(note)
            current = config_fingerprint(self.configs.for_table(table))
            if fingerprint is None or fingerprint == current:
                return Held.QUARANTINED
            self.catalog.quarantine(table, None)
            self.cool_down.succeeded(table)
            log.warning("table %s: released from quarantine: its config changed", table)
        if not self.catalog.merging_enabled(table):
            return Held.DISABLED
        return None

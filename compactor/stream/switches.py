"""Whether a table's work may run: the operator's merging switch, and quarantine (a table whose
merges kept failing), which a change of its config or the operator's `table enable` releases."""

from __future__ import annotations

import logging
from enum import StrEnum

from compactor.catalog.fold import SegmentCatalog
from compactor.stream.cool_down import CoolDown
from compactor.stream.runner import config_fingerprint, quarantine_error
from compactor.stream.table_configs import TableConfigs
from compactor.stream.triggers import Trigger

log = logging.getLogger(__name__)


class Held(StrEnum):
    DISABLED = "disabled"  # an operator turned merging off
    QUARANTINED = "quarantined"


class TableSwitches:
    def __init__(self, catalog: SegmentCatalog, configs: TableConfigs, cool_down: CoolDown) -> None:
        self.catalog = catalog  # the switches and quarantines are kept with each table's mark
        self.configs = configs
        self.cool_down = cool_down

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

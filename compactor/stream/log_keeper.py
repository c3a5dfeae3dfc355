"""The maintainer of the tables' Delta logs: checkpoints written off the merge path.

The job's merge commits leave Delta's inline checkpoint out (`delta.log_upkeep`), so no merge
pays for a replay of the log. This keeper, on a thread of its own (`Ticker`'s logs loop,
without the job's lock), writes a checkpoint for each table whose log holds more than its
`checkpoint_every` commits since the last one, whoever wrote them (the job's merges, loaders,
delta-rs writers that leave checkpoints to others). It knows
each table's version from the catalog (which follows every commit, other writers' too) and
reads a table's `_last_checkpoint` once, then again only when a checkpoint seems due (another
writer may have written one): a round costs nothing per table that is not due. A round spends
at most `budget` seconds writing; tables left over are first in the next round.

A table whose settings hold its checkpoint interval (`hold_checkpoint_interval`) has its
`delta.checkpointInterval` raised once, before its first checkpoint is considered, and given
back when the setting is turned off while the job runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from compactor.delta.store import TableStore
from compactor.errors import Fenced
from compactor.stream.reporting import MetricsSink

log = logging.getLogger(__name__)

ROUND_BUDGET_S = 5.0  # seconds of checkpoint writing per upkeep round, at most


@dataclass(frozen=True, slots=True)
class LogFacts:
    """A table's log as the keeper last saw it."""

    commits_since_checkpoint: int
    checkpoint_version: int  # -1: none yet


class LogKeeper:
    def __init__(
        self,
        store: TableStore,
        every: Callable[[str], int],
        metrics: MetricsSink,
        hold: Callable[[str], bool] = lambda table: False,
        budget: float = ROUND_BUDGET_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.every = every  # a table's checkpoint_every
        self.hold = hold  # a table's hold_checkpoint_interval
        self.metrics = metrics
        self.budget = budget
        self.clock = clock
        self.written = 0  # checkpoints written since the start
        self.most_behind = 0  # the most commits any table was behind when its checkpoint was written
        self._checkpointed: dict[str, int] = {}  # table -> its newest checkpoint's version, as known
        self._facts: dict[str, LogFacts] = {}
        self._held: dict[str, bool] = {}  # table -> its interval as this keeper left it

    def facts(self) -> dict[str, LogFacts]:
        return dict(self._facts)

    def keep(self, versions: Mapping[str, int]) -> list[str]:
        """One round: checkpoint the tables that are due (`versions`: table -> its newest version
        as the catalog knows it), the most behind first, within the budget; a table seen for the
        first time costs one read of its `_last_checkpoint` (within the budget too: after a
        start, the tables are read over a few rounds). The tables written."""
        started, written = self.clock(), []
        for table in set(self._facts) - set(versions):  # tables that left
            self._facts.pop(table, None)
            self._checkpointed.pop(table, None)
            self._held.pop(table, None)
        due = []
        for table, version in versions.items():
            held = self.hold(table)
            if self._held.get(table, False) != held:
                if self.clock() - started > self.budget:
                    continue  # in a later round, before the table's checkpoints are considered
                self._hold_interval(table, held)
            known = self._checkpointed.get(table)
            if known is None:
                if self.clock() - started > self.budget:
                    continue  # read in a later round
                known = self._checkpointed[table] = self.store.last_checkpoint(table)
            self._note(table, version, known)
            if version - known > self.every(table):
                due.append((version - known, table, version))
        for behind, table, version in sorted(due, reverse=True):
            if self.clock() - started > self.budget:
                break
            known = self._checkpointed[table] = self.store.last_checkpoint(table)  # another's?
            if version - known <= self.every(table):
                self._note(table, version, known)
                continue
            try:
                done = self.store.checkpoint(table)
            except Fenced:
                raise
            except Exception:  # the next round tries again; a merge never waits for it
                log.exception("table %s: writing a checkpoint of its log failed", table)
                continue
            self._checkpointed[table] = done
            self._note(table, version, done)
            self.written += 1
            self.most_behind = max(self.most_behind, behind)
            self.metrics.on_checkpoint(table)
            written.append(table)
            log.info(
                "table %s: log checkpointed at version %d (%d commits since the last)", table, done, behind
            )
        return written

    def _hold_interval(self, table: str, held: bool) -> None:
        try:
            changed = self.store.hold_checkpoint_interval(table, held)
        except Fenced:
            raise
        except Exception:  # tried again next round; until then Delta's interval stands
            log.exception("table %s: setting its delta.checkpointInterval failed", table)
            return
        self._held[table] = held
        if changed:
            log.info(
                "table %s: delta.checkpointInterval %s",
                table,
                "raised: the job alone checkpoints its log" if held else "given back to Delta's default",
            )

    def _note(self, table: str, version: int, checkpointed: int) -> None:
        facts = LogFacts(max(0, version - checkpointed), checkpointed)
        self._facts[table] = facts
        self.metrics.on_log(table, facts.commits_since_checkpoint)

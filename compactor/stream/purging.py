"""Deleted rows purged: segments whose files still carry many rows other writers deleted.

Another writer's DELETE or UPDATE (an erasure request, a correction) with
deletion vectors enabled leaves the rows in the files, marked deleted; every
scan reads and drops them until the files are rewritten. A merge rewrites them,
but a table that is merged out (or quiet) is never merged again. So each check
of a table against Delta (after others wrote to it) recounts its segments'
visible and hidden rows, and a segment whose hidden share reaches the table's
`purge_deleted_ratio` waits here. Between batches the job purges one table at a
time (`TableStore.purge`: its due segments in one commit, `dataChange=false`,
checked by Delta against concurrent writers), then checks the table again.

Quiet tables are found by `OtherWriters`: every `every` seconds it probes a
slice of the tables for versions the catalog has not folded yet (one file
lookup per table, no Spark job), so no table waits for an event of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from compactor.catalog.view import CatalogView
from compactor.delta.store import TableStore
from compactor.domain.segments import Segment
from compactor.errors import CommitConflict
from compactor.stream.reporting import MetricsSink

log = logging.getLogger(__name__)

PURGE_RETRY_AFTER = timedelta(minutes=10)  # after a purge failed for other reasons than a conflict


class Purges:
    """The segments due a purge, in the order they were found, each at most once."""

    def __init__(
        self,
        ratio_of: Callable[[str], float | None],
        clock: Callable[[], datetime],
        retry_after: timedelta = PURGE_RETRY_AFTER,
    ) -> None:
        self.ratio_of = ratio_of  # table -> its purge_deleted_ratio (None: never)
        self.clock = clock
        self.retry_after = retry_after
        self.purged = 0  # segments rewritten without their deleted rows
        self._waiting: dict[tuple[str, str], datetime] = {}  # (table, id) -> not before

    def offer(self, segments: Iterable[Segment]) -> None:
        """Queue the segments whose hidden rows reach their table's ratio."""
        for segment in segments:
            if self._due(segment) and (segment.table, segment.id) not in self._waiting:
                log.info(
                    "table %s: segment %s hides %d deleted row(s) (%.0f%%); purge queued",
                    segment.table,
                    segment.id,
                    segment.deleted,
                    100 * segment.deleted_ratio,
                )
                self._waiting[(segment.table, segment.id)] = self.clock()

    def take(self, catalog: CatalogView, busy: Callable[[str], bool]) -> list[Segment]:
        """The next table's segments to purge (in one commit), as the catalog knows them now;
        empty when nothing is due. A segment merged away or purged since it was queued leaves
        the queue; a table with a merge in flight waits (that merge may rewrite the same files)."""
        now, chosen = self.clock(), list[Segment]()
        for key, not_before in list(self._waiting.items()):
            segment = catalog.get(*key)
            if segment is None or not self._due(segment):
                del self._waiting[key]
            elif not_before <= now and not busy(key[0]) and (not chosen or chosen[0].table == key[0]):
                del self._waiting[key]
                chosen.append(segment)
        return chosen

    def done(self, purged: int | None, segments: list[Segment]) -> None:
        """What `purge_segments` did: counted, or (it failed) queued again for `retry_after`."""
        if purged is None:
            self.failed(segments)
        else:
            self.purged += purged

    def failed(self, segments: Iterable[Segment]) -> None:
        """The purge failed: tried again after `retry_after`."""
        for segment in segments:
            self._waiting[(segment.table, segment.id)] = self.clock() + self.retry_after

    def __len__(self) -> int:
        return len(self._waiting)

    def _due(self, segment: Segment) -> bool:
        ratio = self.ratio_of(segment.table)
        return ratio is not None and segment.deleted > 0 and segment.deleted_ratio >= ratio


class OtherWriters:
    """Which tables others wrote to: a slice of the tables probed every `every` seconds."""

    def __init__(self, every: float, per_round: int = 256) -> None:
        self.every = every
        self.per_round = per_round
        self._next_at = 0.0  # monotonic seconds
        self._cursor = 0
        self._awaited_at = 0.0  # when tables refused as unknown are looked for next

    def look_for_awaited(self, now: float) -> bool:
        """Time to look again for the tables refused as unknown (once every `every` seconds)."""
        if now < self._awaited_at:
            return False
        self._awaited_at = now + self.every
        return True

    def due(self, now: float, table_names: Callable[[], Sequence[str]]) -> list[str]:
        """The tables to probe now: the next slice, round-robin, once `every` has passed (the
        table list is asked for only then: most ticks cost one comparison)."""
        if now < self._next_at:
            return []
        tables = table_names()
        if not tables:
            return []
        if self._cursor >= len(tables):
            self._cursor = 0
        chosen = list(tables[self._cursor : self._cursor + self.per_round])
        self._cursor += len(chosen)
        if self._cursor >= len(tables):  # a full round done: the next starts after `every`
            self._next_at = now + self.every
        return chosen


def written_since(store: TableStore, catalog: CatalogView, table: str) -> bool:
    """Whether the table has commits the catalog has not folded (ours or others')."""
    known = catalog.version(table)
    return known is not None and store.latest_version(table) > known


def purge_segments(
    store: TableStore, metrics: MetricsSink, segments: list[Segment], certify: bool | None = None
) -> int | None:
    """Rewrite one table's segments without their deleted rows (`certify`: the table's own
    `certify_merges`): how many were purged (0 after a lost race: the caller's check of the table
    says what is left), None when it failed for another reason (it is retried later)."""
    table = segments[0].table
    ids, rows = ", ".join(s.id for s in segments), sum(s.deleted for s in segments)
    try:
        store.purge(segments, certify)
    except CommitConflict as exc:  # another writer touched the files
        log.info("table %s: purge of %s lost a race (%s); checking the table", table, ids, exc)
        return 0
    except Exception:
        log.exception("table %s: purge of %s failed; tried again later", table, ids)
        return None
    log.info("table %s: purged %d deleted row(s) from %s", table, rows, ids)
    metrics.on_purge(table, len(segments), rows)
    return len(segments)

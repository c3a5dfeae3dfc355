"""What the stream reports as it works: a one-way sink (`observe.metrics.JobMetrics` is one).

The stream never reads anything back from it; what planning needs is the
stream's own `Control`. `NO_METRICS` reports nowhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from compactor.domain.events import MergeResult

# where a batch's time goes: Spark hands the rows over, events decoded, the tables asked which
# segments have rows, the rules evaluated, merges started (run in place with one worker) and
# finished ones recorded, events and results published, the catalog caught up and saved
BATCH_PHASES = ("collect", "decode", "rows_present", "plan", "commit", "publish", "catalog")


class MetricsSink(Protocol):
    def phase(self, name: str) -> AbstractContextManager[None]:
        """Time one phase of a batch or tick (`BATCH_PHASES`)."""

    def on_batch(self, seconds: float) -> None:
        """A micro-batch succeeded after `seconds`."""

    def catalog(self, operation: str) -> AbstractContextManager[None]:
        """Around one call to the catalog store (`load`, `save`, `retired`)."""

    def on_events(self, count: int) -> None:
        """Events whose work is done and saved."""

    def on_merge(self, result: MergeResult, now: datetime) -> None:
        """A plan's result, as it is announced."""

    def merging(self) -> AbstractContextManager[None]:
        """Around one merge's commit (on its worker thread)."""

    def on_conflict(self, table: str) -> None:
        """Another writer won a commit race; the merge is tried again."""

    def on_cancelled(self, table: str) -> None:
        """A merge was cancelled (past its time bound, or by an operator) and reported failed."""

    def on_refused_certificate(self, table: str) -> None:
        """A rewrite's output did not hold its inputs' rows: it was refused before its commit."""

    def on_redelivered(self, table: str) -> None:
        """An event announced a segment already tracked (or merged away since)."""

    def on_quarantine(self, table: str) -> None:
        """The table's merges failed too often in a row: it is quarantined."""

    def on_dead_letter(self, reason: str) -> None: ...

    def on_batch_read(self, by: str) -> None:
        """A micro-batch's events read `by` the driver's Kafka client (`driver`) or a Spark job
        (`spark`)."""

    def on_vacuum(self, table: str) -> None: ...

    def on_attempt(self, scope: str) -> None:
        """An evaluation of a table's rules: `full`, or `near` the segment an event brought."""

    def on_deferring(self, deferring: bool) -> None:
        """Optional merges wait (the job is behind its events), or run again."""

    def on_outage(self, kind: str | None) -> None:
        """Attempts are paused: many tables fail with this kind of error (None: it is over)."""

    def on_log(self, table: str, commits_since_checkpoint: int) -> None:
        """The table's Delta log holds this many commits since its newest checkpoint."""

    def on_checkpoint(self, table: str) -> None:
        """The job's maintainer wrote a checkpoint of the table's log."""

    def on_deleted_rows(self, table: str, deleted: int, stored: int) -> None:
        """The table's files hold `stored` rows, `deleted` of them deleted by other writers."""

    def on_purge(self, table: str, segments: int, rows: int) -> None:
        """`segments` of the table were rewritten without their `rows` deleted rows."""


class NoMetrics:
    """A sink that reports nowhere."""

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def on_batch(self, seconds: float) -> None:
        pass

    @contextlib.contextmanager
    def catalog(self, operation: str) -> Iterator[None]:
        yield

    def on_events(self, count: int) -> None:
        pass

    def on_merge(self, result: MergeResult, now: datetime) -> None:
        pass

    @contextlib.contextmanager
    def merging(self) -> Iterator[None]:
        yield

    def on_conflict(self, table: str) -> None:
        pass

    def on_cancelled(self, table: str) -> None:
        pass

    def on_refused_certificate(self, table: str) -> None:
        pass

    def on_redelivered(self, table: str) -> None:
        pass

    def on_quarantine(self, table: str) -> None:
        pass

    def on_dead_letter(self, reason: str) -> None:
        pass

    def on_batch_read(self, by: str) -> None:
        pass

    def on_vacuum(self, table: str) -> None:
        pass

    def on_attempt(self, scope: str) -> None:
        pass

    def on_deferring(self, deferring: bool) -> None:
        pass

    def on_outage(self, kind: str | None) -> None:
        pass

    def on_log(self, table: str, commits_since_checkpoint: int) -> None:
        pass

    def on_checkpoint(self, table: str) -> None:
        pass

    def on_deleted_rows(self, table: str, deleted: int, stored: int) -> None:
        pass

    def on_purge(self, table: str, segments: int, rows: int) -> None:
        pass

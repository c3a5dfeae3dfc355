"""The job's Prometheus metrics (Hydrolix's merge metrics, in Prometheus naming).

Counters and histograms are moved by the stream's parts as things happen; what
describes the catalog (segments tracked, actual and ideal segment counts, merge
debt) is read from the job's state when Prometheus scrapes. Each job has its own
registry, so several jobs in one process (the tests) never collide.
"""

from __future__ import annotations

import bisect
import collections
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from compactor.domain.events import MergeResult, MergeStatus
from compactor.domain.segments import Segment
from compactor.observe.health_collector import HealthCollector
from compactor.observe.key_index_collector import KeyIndexCollector
from compactor.observe.late_gauges import LateDataCollector
from compactor.stream.control import Control
from compactor.stream.debt_trend import Objective, ingest_hours
from compactor.stream.job_view import JobView

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
PHASE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
SIZE_BUCKETS = tuple(float(2**n) for n in range(20, 33, 2))  # 1 MiB .. 4 GiB, by fours
AGE_BUCKETS = (60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400, 30 * 86400)
# a table as the scrape sees it: its name, its live segments, whether merging is on, its max_debt
TableView = tuple[str, Sequence[Segment], bool, timedelta | None]


def _counter(r: CollectorRegistry, name: str, text: str, *labels: str) -> Counter:
    return Counter(name, text, labels, registry=r)


def _gauge(r: CollectorRegistry, name: str, text: str, *labels: str) -> Gauge:
    return Gauge(name, text, labels, registry=r)


def _histogram(
    r: CollectorRegistry, name: str, text: str, buckets: tuple[float, ...], *labels: str
) -> Histogram:
    return Histogram(name, text, labels, buckets=buckets, registry=r)


class JobMetrics:
    """The job's metrics; the stream calls the `on_*` methods, Prometheus reads the registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()

        # merges
        self.merges_completed = _counter(
            r, "compactor_merges_completed", "Merges committed.", "table", "rule"
        )
        self.merges_failed = _counter(
            r, "compactor_merges_failed", "Merges that did not commit, by status.", "table", "rule", "reason"
        )
        self.merge_duration = _histogram(
            r,
            "compactor_merge_duration_seconds",
            "Time a committed merge took.",
            DURATION_BUCKETS,
            "table",
            "rule",
        )
        self.rows = _counter(
            r, "compactor_merge_rows", "Rows read and written by merges.", "table", "direction"
        )
        self.bytes = _counter(
            r, "compactor_merge_bytes", "Bytes read and written by merges.", "table", "direction"
        )
        self.conflicts_lost = _counter(
            r, "compactor_conflicts_lost", "Commits another writer won (a lost commit race).", "table"
        )
        self.merge_write = _histogram(
            r,
            "compactor_merge_write_seconds",
            "Time a committed merge spent writing (uploading) its files, before Delta's commit.",
            DURATION_BUCKETS,
            "table",
        )
        self.merge_commit = _histogram(
            r,
            "compactor_merge_commit_seconds",
            "Time Delta's commit of a merge took once its files were written.",
            PHASE_BUCKETS,
            "table",
        )
        self.retries = _counter(r, "compactor_merge_retries", "Merge commits tried again.", "table")
        self.cancelled = _counter(
            r, "compactor_merges_cancelled", "Merges cancelled (hung, or by an operator).", "table"
        )
        self.redelivered = _counter(
            r,
            "compactor_events_redelivered",
            "Events of segments already tracked or merged away (Hydrolix's merge: partitions sourced that are already tracked).",
            "table",
        )
        self.quarantines = _counter(
            r,
            "compactor_quarantines",
            "Times a table was quarantined after its merges failed in a row.",
            "table",
        )
        self.active_merges = _gauge(r, "compactor_active_merges", "Merges being committed now.")
        self.busy_seconds = _counter(
            r,
            "compactor_merge_busy_seconds",
            "Time spent committing merges; its rate is the executors' duty cycle.",
        )
        self.bucket_age = _histogram(
            r,
            "compactor_bucket_age_seconds",
            "Age of a merge's oldest input when it committed.",
            AGE_BUCKETS,
            "table",
        )
        self._stream_metrics(r)

    def _stream_metrics(self, r: CollectorRegistry) -> None:
        self.events = _counter(
            r, "compactor_events", "Events from the segments topic whose work is done and saved."
        )
        self.dead_letters = _counter(
            r, "compactor_dead_letters", "Events refused to the dead-letter topic.", "reason"
        )
        self.batch_duration = _histogram(
            r, "compactor_batch_duration_seconds", "Time one micro-batch took.", DURATION_BUCKETS
        )
        self.last_success = _gauge(
            r, "compactor_last_batch_success_timestamp_seconds", "When a micro-batch last succeeded."
        )
        self.batch_phase = _histogram(
            r,
            "compactor_batch_phase_seconds",
            "Time a micro-batch spent in one phase (see BATCH_PHASES).",
            PHASE_BUCKETS,
            "phase",
        )
        self.deferring = _gauge(
            r,
            "compactor_deferring_optional_merges",
            "1 while the job is too far behind its events to run optional merges (admission control).",
        )
        self.outage = _gauge(
            r,
            "compactor_outage",
            "1 while attempts are paused because many tables fail with one kind of error (an outage: "
            "no table is quarantined for it).",
        )
        self.outages = _counter(r, "compactor_outages", "Outages seen: attempts paused, tables not blamed.")
        self._in_outage = False
        self.log_commits = _gauge(
            r,
            "compactor_log_commits_since_checkpoint",
            "Commits in the table's Delta log since its newest checkpoint (the job's maintainer "
            "writes one past the table's checkpoint_every).",
            "table",
        )
        self.checkpoints = _counter(
            r,
            "compactor_checkpoints",
            "Checkpoints of a table's log written by the job's maintainer.",
            "table",
        )
        self.plan_attempts = _counter(
            r,
            "compactor_plan_attempts",
            "Evaluations of a table's rules: full, or near the segment an event brought.",
            "scope",
        )
        self.catalog_seconds = _histogram(
            r,
            "compactor_catalog_seconds",
            "Time one call to the catalog store took: load, save, retired (a lookup).",
            PHASE_BUCKETS,
            "operation",
        )
        self.consumer_lag = _gauge(
            r, "compactor_consumer_lag_events", "Events on the segments topic the query has not processed."
        )
        # cleanup
        self.vacuums = _counter(r, "compactor_vacuums", "VACUUM runs that completed.", "table")
        self.last_vacuum = _gauge(
            r, "compactor_last_vacuum_timestamp_seconds", "When a table's VACUUM last completed.", "table"
        )
        self.deleted_rows = _gauge(
            r,
            "compactor_deleted_rows",
            "Rows other writers deleted that deletion vectors still hide in the table's files.",
            "table",
        )
        self.deleted_ratio = _gauge(
            r, "compactor_deleted_rows_ratio", "Deleted rows over all rows in the table's files.", "table"
        )
        self.purges = _counter(
            r, "compactor_purges", "Segments rewritten without their deleted rows.", "table"
        )
        self.purged_rows = _counter(r, "compactor_purged_rows", "Deleted rows purged from files.", "table")

    # -- what the stream reports ------------------------------------------------------------

    def on_events(self, count: int) -> None:
        self.events.inc(count)

    def phase(self, name: str) -> AbstractContextManager[None]:
        """Time one phase of the batch (`BATCH_PHASES`)."""
        return self.batch_phase.labels(name).time()

    def catalog(self, operation: str) -> AbstractContextManager[None]:
        """Time one call to the catalog store."""
        return self.catalog_seconds.labels(operation).time()

    def on_batch(self, seconds: float) -> None:
        self.batch_duration.observe(seconds)
        self.last_success.set_to_current_time()

    def on_merge(self, result: MergeResult, now: datetime) -> None:
        plan = result.plan
        table, rule = plan.table, str(plan.rule)
        if result.status is not MergeStatus.SUCCEEDED:
            error = result.error or ""
            reason = error.split(":", 1)[0] if error.startswith("insufficient_space") else str(result.status)
            self.merges_failed.labels(table, rule, reason.lower()).inc()
            return
        self.merges_completed.labels(table, rule).inc()
        self.merge_duration.labels(table, rule).observe(result.duration_ms / 1000)
        if result.write_ms is not None and result.commit_ms is not None:
            self.merge_write.labels(table).observe(result.write_ms / 1000)
            self.merge_commit.labels(table).observe(result.commit_ms / 1000)
        self.rows.labels(table, "in").inc(result.records_in)
        self.rows.labels(table, "out").inc(result.records_out)
        self.bytes.labels(table, "in").inc(result.bytes_in)
        self.bytes.labels(table, "out").inc(result.bytes_out)
        oldest = min((s.loaded_at for s in plan.inputs), default=None)
        if oldest is not None:
            self.bucket_age.labels(table).observe(max(0.0, (now - oldest).total_seconds()))

    def on_vacuum(self, table: str) -> None:
        self.vacuums.labels(table).inc()
        self.last_vacuum.labels(table).set_to_current_time()

    def on_deleted_rows(self, table: str, deleted: int, stored: int) -> None:
        self.deleted_rows.labels(table).set(deleted)
        self.deleted_ratio.labels(table).set(deleted / stored if stored else 0.0)

    def on_purge(self, table: str, segments: int, rows: int) -> None:
        self.purges.labels(table).inc(segments)
        self.purged_rows.labels(table).inc(rows)

    def on_conflict(self, table: str) -> None:
        self.conflicts_lost.labels(table).inc()
        self.retries.labels(table).inc()

    def on_cancelled(self, table: str) -> None:
        self.cancelled.labels(table).inc()

    def on_redelivered(self, table: str) -> None:
        self.redelivered.labels(table).inc()

    def on_quarantine(self, table: str) -> None:
        self.quarantines.labels(table).inc()

    def on_dead_letter(self, reason: str) -> None:
        self.dead_letters.labels(reason).inc()

    def on_attempt(self, scope: str) -> None:
        self.plan_attempts.labels(scope).inc()

    def on_deferring(self, deferring: bool) -> None:
        self.deferring.set(1 if deferring else 0)

    def on_log(self, table: str, commits_since_checkpoint: int) -> None:
        self.log_commits.labels(table).set(commits_since_checkpoint)

    def on_checkpoint(self, table: str) -> None:
        self.checkpoints.labels(table).inc()

    def on_outage(self, kind: str | None) -> None:
        if kind is not None and not self._in_outage:
            self.outages.inc()
        self._in_outage = kind is not None
        self.outage.set(1 if self._in_outage else 0)

    def merging(self) -> _Busy:
        """A context around one merge's commit: the active gauge and the busy time."""
        return _Busy(self)

    def watch(self, job: JobView) -> None:
        """Report the stream's tables (segments, debt, late data) and its lag at each scrape."""
        catalog, configs, control = job.catalog, job.configs, job.control
        # unknown (no progress yet, or one Spark could not give offsets for): NaN, not a stale 0
        self.consumer_lag.set_function(lambda: math.nan if control.lag is None else control.lag)
        self.registry.register(
            _CatalogCollector(
                control,
                lambda: [
                    (t, catalog.segments(t), catalog.merging_enabled(t), configs.for_table(t).max_debt)
                    for t in catalog.table_names
                ],
                job.clock,
            )
        )
        self.registry.register(HealthCollector(job))
        self.registry.register(KeyIndexCollector(job.key_indexes))
        self.registry.register(  # tables that do not seal report no late data
            LateDataCollector(
                lambda: [(t, catalog.segments(t), configs.for_table(t).rules) for t in catalog.table_names]
            )
        )


class _Busy:
    def __init__(self, metrics: JobMetrics) -> None:
        self.metrics = metrics
        self.start = 0.0

    def __enter__(self) -> None:
        self.metrics.active_merges.inc()
        self.start = time.monotonic()

    def __exit__(self, *_: object) -> None:
        self.metrics.active_merges.dec()
        self.metrics.busy_seconds.inc(time.monotonic() - self.start)


class _CatalogCollector(Collector):
    """Gauges read off the catalog at scrape time: tracked segments, ideal counts, debt."""

    def __init__(
        self,
        control: Control,
        tables: Callable[[], Iterable[TableView]],
        clock: Callable[[], datetime],
    ) -> None:
        self.control = control
        self.tables = tables
        self.clock = clock

    def _snapshot(self) -> list[TableView]:
        """The tables as the batch thread leaves them; a copy taken while it changed them is retaken."""
        for _ in range(10):
            try:
                return list(self.tables())
            except RuntimeError:  # a dict changed size while it was copied
                time.sleep(0.01)
        return []

    def collect(self) -> Iterator[Metric]:
        tracked = GaugeMetricFamily(
            "compactor_segments",
            "Segments tracked, by table, level and state.",
            labels=["table", "level", "state"],
        )
        per_table = {
            name: GaugeMetricFamily(name, text, labels=["table"]) for name, text in TABLE_GAUGES.items()
        }
        per_level = {
            name: GaugeMetricFamily(name, text, labels=["table", "level"])
            for name, text in LEVEL_GAUGES.items()
        }
        now = self.clock()
        objective = GaugeMetricFamily(
            "compactor_debt_objective",
            "1 for the state of the table's max_debt objective (met, at_risk, breached), 0 for the others.",
            labels=["table", "state"],
        )
        sizes = HistogramMetricFamily(
            "compactor_segment_size_bytes", "Sizes of a table's live segments (bytes).", labels=["table"]
        )
        for table, segments, merging, max_debt in self._snapshot():
            sizes.add_metric([table], *size_buckets([s.bytes for s in segments]))
            for (level, state), n in sorted(
                collections.Counter((str(s.level), str(s.state)) for s in segments).items()
            ):
                tracked.add_metric([table, level, state], n)
            for name, value in self._table_values(table, segments, merging, now).items():
                per_table[name].add_metric([table], value)
            outlook = self.control.outlook(table, now, max_debt)
            for name, value in (outlook.gauges() if outlook else {}).items():
                per_table[name].add_metric([table], value)
            if outlook is not None and outlook.objective is not None:
                for state in Objective:
                    objective.add_metric([table, str(state)], 1.0 if outlook.objective is state else 0.0)
            for waiting_level, (count, size) in self._debt_by_level(table).items():
                per_level["compactor_debt_level_segments"].add_metric([table, waiting_level], count)
                per_level["compactor_debt_level_bytes"].add_metric([table, waiting_level], size)
        yield tracked
        yield sizes
        yield objective
        yield from per_table.values()
        yield from per_level.values()

    def _debt_by_level(self, table: str) -> dict[str, tuple[int, int]]:
        """Segments and bytes waiting to merge, by the waiting segments' level."""
        found: dict[str, tuple[int, int]] = {}
        for inputs in self.control.debt_inputs(table):
            for s in inputs:
                count, size = found.get(str(s.level), (0, 0))
                found[str(s.level)] = (count + 1, size + s.bytes)
        return dict(sorted(found.items()))

    def _table_values(
        self, table: str, segments: Sequence[Segment], merging: bool, now: datetime
    ) -> dict[str, float]:
        debt = self.control.debt(table)
        ideal = max(len(segments) - (debt.segments - debt.candidates), 0)  # each plan leaves one segment
        oldest = debt.oldest_loaded_at
        return {
            "compactor_segment_bytes": sum(s.bytes for s in segments),
            "compactor_actual_segments": len(segments),
            "compactor_ideal_segments": ideal,
            "compactor_merge_efficiency": ideal / len(segments) if segments else 1.0,
            "compactor_merge_candidates": debt.candidates,
            "compactor_debt_segments": debt.segments,
            "compactor_debt_bytes": debt.bytes,
            "compactor_debt_oldest_age_seconds": (now - oldest).total_seconds() if oldest else 0.0,
            "compactor_debt_ingest_hours": ingest_hours(
                debt.bytes, self.control.ingest.bytes_per_hour(table, now)
            ),
            "compactor_merging_enabled": 1.0 if merging else 0.0,
            "compactor_write_amplification": self.control.writes.amplification(table, now),
        }


# per-table gauges read off the catalog at scrape time
TABLE_GAUGES = {
    "compactor_segment_bytes": "Bytes of the tracked segments.",
    "compactor_actual_segments": "Segments a table has now.",
    "compactor_ideal_segments": "Segments the table would have if every ready merge were done.",
    "compactor_merge_efficiency": "Ideal over actual segment count (1 when nothing waits).",
    "compactor_merge_candidates": "Merges ready to run.",
    "compactor_debt_segments": "Segments the rules would merge now.",
    "compactor_debt_bytes": "Bytes the rules would merge now.",
    "compactor_debt_oldest_age_seconds": "Age of the oldest segment waiting to merge.",
    "compactor_debt_ingest_hours": "Debt in hours of ingest (its bytes over the last day's ingest rate).",
    "compactor_merging_enabled": "1 unless an operator turned the table's merging off.",
    "compactor_write_amplification": "Bytes merges rewrote over bytes loaded, over the last 30 days.",
    "compactor_debt_drain_bytes_per_hour": "Net fall of the debt per hour over the last 15 minutes.",
    "compactor_debt_eta_seconds": "Until the debt is paid at its drain rate (+Inf while it does not fall).",
    "compactor_debt_stuck": "1 when the debt has not fallen for 10 evaluations while the job kept up.",
}


# merge debt by the level of the waiting segments (0: as loaded)
LEVEL_GAUGES = {
    "compactor_debt_level_segments": "Segments of this level the rules would merge now.",
    "compactor_debt_level_bytes": "Bytes of this level's segments the rules would merge now.",
}


def size_buckets(sizes: Sequence[int]) -> tuple[list[tuple[str, float]], float]:
    """A histogram's cumulative buckets (`le`, count) and sum, of segment sizes."""
    ordered = sorted(sizes)
    buckets = [(str(edge), float(bisect.bisect_right(ordered, edge))) for edge in SIZE_BUCKETS]
    return [*buckets, ("+Inf", float(len(ordered)))], float(sum(ordered))

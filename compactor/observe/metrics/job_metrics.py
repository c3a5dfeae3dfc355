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

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from compactor.domain.events import MergeResult, MergeStatus
from compactor.domain.segments import Segment
from compactor.observe.metrics.declared import counter, gauge, gauge_family, histogram, histogram_family
from compactor.observe.metrics.health_collector import HealthCollector
from compactor.observe.metrics.key_index_collector import KeyIndexCollector
from compactor.observe.metrics.late_gauges import LateDataCollector
from compactor.stream.control import Control
from compactor.stream.debt_trend import Objective, ingest_hours
from compactor.stream.job_view import JobView

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
PHASE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
SIZE_BUCKETS = tuple(float(2**n) for n in range(20, 33, 2))  # 1 MiB .. 4 GiB, by fours
AGE_BUCKETS = (60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400, 30 * 86400)
# a table as the scrape sees it: its name, its live segments, whether merging is on, its max_debt
TableView = tuple[str, Sequence[Segment], bool, timedelta | None]


class JobMetrics:
    """The job's metrics; the stream calls the `on_*` methods, Prometheus reads the registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()

        # merges
        self.merges_completed = counter(r, "compactor_merges_completed")
        self.merges_failed = counter(r, "compactor_merges_failed")
        self.merge_duration = histogram(r, "compactor_merge_duration_seconds", DURATION_BUCKETS)
        self.rows = counter(r, "compactor_merge_rows")
        self.bytes = counter(r, "compactor_merge_bytes")
        self.conflicts_lost = counter(r, "compactor_conflicts_lost")
        self.merge_write = histogram(r, "compactor_merge_write_seconds", DURATION_BUCKETS)
        self.merge_commit = histogram(r, "compactor_merge_commit_seconds", PHASE_BUCKETS)
        self.retries = counter(r, "compactor_merge_retries")
        self.cancelled = counter(r, "compactor_merges_cancelled")
        self.refused_certificates = counter(r, "compactor_certificates_refused")
        self.redelivered = counter(r, "compactor_events_redelivered")
        self.quarantines = counter(r, "compactor_quarantines")
        self.active_merges = gauge(r, "compactor_active_merges")
        self.busy_seconds = counter(r, "compactor_merge_busy_seconds")
        self.bucket_age = histogram(r, "compactor_bucket_age_seconds", AGE_BUCKETS)
        self._stream_metrics(r)

    def _stream_metrics(self, r: CollectorRegistry) -> None:
        self.events = counter(r, "compactor_events")
        self.dead_letters = counter(r, "compactor_dead_letters")
        self.batch_reads = counter(r, "compactor_batch_reads")
        self.batch_duration = histogram(r, "compactor_batch_duration_seconds", DURATION_BUCKETS)
        self.last_success = gauge(r, "compactor_last_batch_success_timestamp_seconds")
        self.batch_phase = histogram(r, "compactor_batch_phase_seconds", PHASE_BUCKETS)
        self.deferring = gauge(r, "compactor_deferring_optional_merges")
        self.outage = gauge(r, "compactor_outage")
        self.outages = counter(r, "compactor_outages")
        self._in_outage = False
        self.log_commits = gauge(r, "compactor_log_commits_since_checkpoint")
        self.commit_cache = gauge(r, "compactor_commit_cache_bytes")
        self.checkpoints = counter(r, "compactor_checkpoints")
        self.plan_attempts = counter(r, "compactor_plan_attempts")
        self.catalog_seconds = histogram(r, "compactor_catalog_seconds", PHASE_BUCKETS)
        self.consumer_lag = gauge(r, "compactor_consumer_lag_events")
        # cleanup
        self.vacuums = counter(r, "compactor_vacuums")
        self.last_vacuum = gauge(r, "compactor_last_vacuum_timestamp_seconds")
        self.deleted_rows = gauge(r, "compactor_deleted_rows")
        self.deleted_ratio = gauge(r, "compactor_deleted_rows_ratio")
        self.purges = counter(r, "compactor_purges")
        self.purged_rows = counter(r, "compactor_purged_rows")

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

    def on_refused_certificate(self, table: str) -> None:
        self.refused_certificates.labels(table).inc()

    def on_redelivered(self, table: str) -> None:
        self.redelivered.labels(table).inc()

    def on_quarantine(self, table: str) -> None:
        self.quarantines.labels(table).inc()

    def on_dead_letter(self, reason: str) -> None:
        self.dead_letters.labels(reason).inc()

    def on_batch_read(self, by: str) -> None:
        self.batch_reads.labels(by).inc()

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
        self.commit_cache.set_function(job.kept_commit_bytes)
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
        tracked = gauge_family("compactor_segments")
        per_table = {name: gauge_family(name) for name in TABLE_GAUGES}
        per_level = {name: gauge_family(name) for name in LEVEL_GAUGES}
        now = self.clock()
        objective = gauge_family("compactor_debt_objective")
        sizes = histogram_family("compactor_segment_size_bytes")
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
TABLE_GAUGES = (
    "compactor_segment_bytes",
    "compactor_actual_segments",
    "compactor_ideal_segments",
    "compactor_merge_efficiency",
    "compactor_merge_candidates",
    "compactor_debt_segments",
    "compactor_debt_bytes",
    "compactor_debt_oldest_age_seconds",
    "compactor_debt_ingest_hours",
    "compactor_merging_enabled",
    "compactor_write_amplification",
    "compactor_debt_drain_bytes_per_hour",
    "compactor_debt_eta_seconds",
    "compactor_debt_stuck",
)
# merge debt by the level of the waiting segments (0: as loaded)
LEVEL_GAUGES = ("compactor_debt_level_segments", "compactor_debt_level_bytes")


def size_buckets(sizes: Sequence[int]) -> tuple[list[tuple[str, float]], float]:
    """A histogram's cumulative buckets (`le`, count) and sum, of segment sizes."""
    ordered = sorted(sizes)
    buckets = [(str(edge), float(bisect.bisect_right(ordered, edge))) for edge in SIZE_BUCKETS]
    return [*buckets, ("+Inf", float(len(ordered)))], float(sum(ordered))

"""Every metric the job exports, declared once: its name, kind, labels, help and the docs' section.

The metrics and the collectors build their Prometheus objects from these (`counter`, `gauge`,
`histogram`, `family`), and the metrics page of the docs is generated from them
(`docs/hooks/metrics_reference.py`), so the two cannot drift apart. Every sample also carries the
`shard` it comes from (`shard_metrics`), but the lease's, which are the job's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

Kind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class Declared:
    name: str  # a counter's as declared: Prometheus exports it with `_total`
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    section: str = ""

    @property
    def exported(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name


MERGES = "Merges"
DEBT = "Segments and merge debt"
BATCHES = "Events and batches"
TABLES = "Tables' health"
LOGS = "Logs, VACUUM and purges"
LATE = "Late data (tables with `sealing`)"
KEYS = "Upsert tables' key indexes"
LEASE = "The job's lease (no `shard` label: the job's own)"
DRIVER = "The driver's Python process (no `shard` label: the job's own)"
SECTIONS = (MERGES, DEBT, BATCHES, TABLES, LOGS, LATE, KEYS, LEASE, DRIVER)

T = ("table",)

METRICS: tuple[Declared, ...] = (
    # merges
    Declared("compactor_merges_completed", "counter", "Merges committed.", ("table", "rule"), MERGES),
    Declared(
        "compactor_merges_failed",
        "counter",
        "Merges that did not commit, by status (failed, skipped).",
        ("table", "rule", "reason"),
        MERGES,
    ),
    Declared(
        "compactor_merge_duration_seconds",
        "histogram",
        "Time a committed merge took.",
        ("table", "rule"),
        MERGES,
    ),
    Declared(
        "compactor_merge_write_seconds",
        "histogram",
        "Time a committed merge spent writing (uploading) its files, before Delta's commit.",
        T,
        MERGES,
    ),
    Declared(
        "compactor_merge_commit_seconds",
        "histogram",
        "Time Delta's commit of a merge took once its files were written.",
        T,
        MERGES,
    ),
    Declared(
        "compactor_merge_rows", "counter", "Rows read and written by merges.", ("table", "direction"), MERGES
    ),
    Declared(
        "compactor_merge_bytes",
        "counter",
        "Bytes read and written by merges.",
        ("table", "direction"),
        MERGES,
    ),
    Declared(
        "compactor_conflicts_lost", "counter", "Commits another writer won (a lost commit race).", T, MERGES
    ),
    Declared("compactor_merge_retries", "counter", "Merge commits tried again.", T, MERGES),
    Declared(
        "compactor_merges_cancelled", "counter", "Merges cancelled (hung, or by an operator).", T, MERGES
    ),
    Declared(
        "compactor_certificates_refused",
        "counter",
        "Merges refused before their commit: the rows written were not exactly the rows read.",
        T,
        MERGES,
    ),
    Declared(
        "compactor_quarantines",
        "counter",
        "Times a table was quarantined after its merges failed in a row.",
        T,
        MERGES,
    ),
    Declared("compactor_active_merges", "gauge", "Merges being committed now.", (), MERGES),
    Declared(
        "compactor_merge_busy_seconds",
        "counter",
        "Time spent committing merges; its rate is the executors' duty cycle.",
        (),
        MERGES,
    ),
    Declared(
        "compactor_bucket_age_seconds",
        "histogram",
        "Age of a merge's oldest input when it committed.",
        T,
        MERGES,
    ),
    Declared(
        "compactor_plan_attempts",
        "counter",
        "Evaluations of a table's rules: full, or near the segment an event brought.",
        ("scope",),
        MERGES,
    ),
    # segments and debt
    Declared(
        "compactor_segments",
        "gauge",
        "Segments tracked, by table, level and state.",
        ("table", "level", "state"),
        DEBT,
    ),
    Declared("compactor_segment_bytes", "gauge", "Bytes of the tracked segments.", T, DEBT),
    Declared(
        "compactor_segment_size_bytes", "histogram", "Sizes of a table's live segments (bytes).", T, DEBT
    ),
    Declared("compactor_actual_segments", "gauge", "Segments a table has now.", T, DEBT),
    Declared(
        "compactor_ideal_segments",
        "gauge",
        "Segments the table would have if every ready merge were done.",
        T,
        DEBT,
    ),
    Declared(
        "compactor_merge_efficiency",
        "gauge",
        "Ideal over actual segment count (1 when nothing waits).",
        T,
        DEBT,
    ),
    Declared("compactor_merge_candidates", "gauge", "Merges ready to run.", T, DEBT),
    Declared("compactor_debt_segments", "gauge", "Segments the rules would merge now.", T, DEBT),
    Declared("compactor_debt_bytes", "gauge", "Bytes the rules would merge now.", T, DEBT),
    Declared(
        "compactor_debt_oldest_age_seconds", "gauge", "Age of the oldest segment waiting to merge.", T, DEBT
    ),
    Declared(
        "compactor_debt_ingest_hours",
        "gauge",
        "Debt in hours of ingest (its bytes over the last day's ingest rate).",
        T,
        DEBT,
    ),
    Declared(
        "compactor_debt_level_segments",
        "gauge",
        "Segments of this level the rules would merge now (0: as loaded).",
        ("table", "level"),
        DEBT,
    ),
    Declared(
        "compactor_debt_level_bytes",
        "gauge",
        "Bytes of this level's segments the rules would merge now.",
        ("table", "level"),
        DEBT,
    ),
    Declared(
        "compactor_write_amplification",
        "gauge",
        "Bytes merges rewrote over bytes loaded, over the last 30 days.",
        T,
        DEBT,
    ),
    Declared(
        "compactor_debt_drain_bytes_per_hour",
        "gauge",
        "Net fall of the debt per hour over the last 15 minutes.",
        T,
        DEBT,
    ),
    Declared(
        "compactor_debt_eta_seconds",
        "gauge",
        "Until the debt is paid at its drain rate (+Inf while it does not fall).",
        T,
        DEBT,
    ),
    Declared(
        "compactor_debt_stuck",
        "gauge",
        "1 when the debt has not fallen for 10 evaluations while the job kept up.",
        T,
        DEBT,
    ),
    Declared(
        "compactor_debt_objective",
        "gauge",
        "1 for the state of the table's max_debt objective (met, at_risk, breached), 0 for the others.",
        ("table", "state"),
        DEBT,
    ),
    Declared(
        "compactor_merging_enabled", "gauge", "1 unless an operator turned the table's merging off.", T, DEBT
    ),
    # events and batches
    Declared(
        "compactor_events",
        "counter",
        "Events from the segments topic whose work is done and saved.",
        (),
        BATCHES,
    ),
    Declared(
        "compactor_dead_letters", "counter", "Events refused to the dead-letter topic.", ("reason",), BATCHES
    ),
    Declared(
        "compactor_batch_reads",
        "counter",
        "Micro-batches whose events were read by the driver's Kafka client (by=driver) or by a Spark "
        "job (by=spark: operations.driver_batch_reads off, or the driver could not; the log says why).",
        ("by",),
        BATCHES,
    ),
    Declared(
        "compactor_events_redelivered",
        "counter",
        "Events of segments already tracked or merged away (Hydrolix's merge: partitions sourced "
        "that are already tracked).",
        T,
        BATCHES,
    ),
    Declared(
        "compactor_consumer_lag_events",
        "gauge",
        "Events on the segments topic the query has not processed (NaN while its progress cannot tell).",
        (),
        BATCHES,
    ),
    Declared("compactor_batch_duration_seconds", "histogram", "Time one micro-batch took.", (), BATCHES),
    Declared(
        "compactor_last_batch_success_timestamp_seconds",
        "gauge",
        "When a micro-batch last succeeded.",
        (),
        BATCHES,
    ),
    Declared(
        "compactor_batch_phase_seconds",
        "histogram",
        "Time a micro-batch spent in one phase: collect, decode, rows_present, plan, commit, publish, catalog.",
        ("phase",),
        BATCHES,
    ),
    Declared(
        "compactor_catalog_seconds",
        "histogram",
        "Time one call to the catalog store took: load, save, retired (a lookup).",
        ("operation",),
        BATCHES,
    ),
    Declared(
        "compactor_deferring_optional_merges",
        "gauge",
        "1 while the job is too far behind its events to run optional merges (admission control).",
        (),
        BATCHES,
    ),
    # tables' health
    Declared(
        "compactor_table_health",
        "gauge",
        "The table's health, 0 (worst) to 100 (see `compactor status`).",
        T,
        TABLES,
    ),
    Declared(
        "compactor_table_state",
        "gauge",
        "1 for the table's state now: merged, awaiting, merging, waiting, quarantined or disabled.",
        ("table", "state"),
        TABLES,
    ),
    Declared(
        "compactor_table_state_seconds",
        "counter",
        "Time the table has spent in each state (between scrapes).",
        ("table", "state"),
        TABLES,
    ),
    Declared(
        "compactor_outage",
        "gauge",
        "1 while attempts are paused because many tables fail with one kind of error (an outage: "
        "no table is quarantined for it).",
        (),
        TABLES,
    ),
    Declared("compactor_outages", "counter", "Outages seen: attempts paused, tables not blamed.", (), TABLES),
    # logs and cleanup
    Declared(
        "compactor_log_commits_since_checkpoint",
        "gauge",
        "Commits in the table's Delta log since its newest checkpoint (the job's maintainer writes one "
        "past the table's checkpoint_every).",
        T,
        LOGS,
    ),
    Declared(
        "compactor_commit_cache_bytes",
        "gauge",
        "Bytes of Delta commit text behind the parsed commits the job keeps for its tables' logs "
        "(bounded by COMMIT_CACHE_BYTES; the parsed commits take about five times as much memory).",
        (),
        LOGS,
    ),
    Declared(
        "compactor_checkpoints",
        "counter",
        "Checkpoints of a table's log written by the job's maintainer.",
        T,
        LOGS,
    ),
    Declared("compactor_vacuums", "counter", "VACUUM runs that completed.", T, LOGS),
    Declared(
        "compactor_last_vacuum_timestamp_seconds", "gauge", "When a table's VACUUM last completed.", T, LOGS
    ),
    Declared(
        "compactor_deleted_rows",
        "gauge",
        "Rows other writers deleted that deletion vectors still hide in the table's files.",
        T,
        LOGS,
    ),
    Declared(
        "compactor_deleted_rows_ratio", "gauge", "Deleted rows over all rows in the table's files.", T, LOGS
    ),
    Declared("compactor_purges", "counter", "Segments rewritten without their deleted rows.", T, LOGS),
    Declared("compactor_purged_rows", "counter", "Deleted rows purged from files.", T, LOGS),
    # late data
    Declared(
        "compactor_watermark_seconds",
        "gauge",
        "Event-time watermark: the latest event end held minus the allowed lateness (epoch s).",
        T,
        LATE,
    ),
    Declared("compactor_late_segments", "gauge", "Late segments waiting beside what they overlap.", T, LATE),
    Declared(
        "compactor_late_bytes", "gauge", "Bytes of late segments waiting beside what they overlap.", T, LATE
    ),
    Declared("compactor_late_sealed_buckets", "gauge", "Sealed late runs waiting to fold.", T, LATE),
    # upsert key indexes
    Declared("compactor_key_index_keys", "gauge", "Keys in the upsert table's key index.", T, KEYS),
    Declared(
        "compactor_key_index_bytes",
        "gauge",
        "Driver memory the key index's columns take (0 for one kept as a dict: a comparison column of "
        "strings or decimals).",
        T,
        KEYS,
    ),
    Declared(
        "compactor_key_index_snapshot_version",
        "gauge",
        "The table version of the index's latest snapshot on the warehouse (absent: none yet).",
        T,
        KEYS,
    ),
    Declared(
        "compactor_key_index_snapshot_age_seconds",
        "gauge",
        "Seconds since the job wrote (or took back) the index's latest snapshot.",
        T,
        KEYS,
    ),
    # the lease
    Declared("compactor_lease_shards_held", "gauge", "Shards this job holds now.", (), LEASE),
    Declared(
        "compactor_lease_lost",
        "gauge",
        "1 while this job has lost shards with their session and is rejoining.",
        (),
        LEASE,
    ),
    Declared(
        "compactor_lease_lost",
        "counter",
        "Times shards were lost with the group session (the job stopped them and rejoined).",
        (),
        LEASE,
    ),
    Declared("compactor_lease_rejoined", "counter", "Times lost shards came back to this job.", (), LEASE),
    Declared(
        "compactor_lease_rebuilt",
        "counter",
        "Times the lease's consumer was rebuilt after a fatal error.",
        (),
        LEASE,
    ),
    Declared(
        "compactor_lease_last_outage_seconds",
        "gauge",
        "How long the last lost session lasted, until the rejoin.",
        (),
        LEASE,
    ),
    # the driver's Python process
    Declared(
        "compactor_driver_memory_bytes",
        "gauge",
        "The driver's Python memory by allocator: `malloc_in_use` (C allocations live now: Python's "
        "objects over 512 bytes, libraries' buffers), `malloc_free` (freed but kept by the C "
        "allocator: fragmentation), `arrow_pool` (Arrow's buffers). Each is left out where the "
        "platform cannot tell it.",
        ("kind",),
        DRIVER,
    ),
    Declared(
        "compactor_driver_python_blocks",
        "gauge",
        "Memory blocks Python's allocator has handed out and not taken back (its objects, small and "
        "large): a count that grows only while the job keeps more objects.",
        (),
        DRIVER,
    ),
)

_BY_KEY = {(m.name, m.kind): m for m in METRICS}


def declared(name: str, kind: Kind) -> Declared:
    """The declaration of one metric (a KeyError names a metric nobody declared)."""
    try:
        return _BY_KEY[(name, kind)]
    except KeyError:
        raise KeyError(f"metric {name} ({kind}) is not declared in observe/metrics/declared.py") from None


def counter(registry: CollectorRegistry, name: str) -> Counter:
    m = declared(name, "counter")
    return Counter(m.name, m.help, m.labels, registry=registry)


def gauge(registry: CollectorRegistry, name: str) -> Gauge:
    m = declared(name, "gauge")
    return Gauge(m.name, m.help, m.labels, registry=registry)


def histogram(registry: CollectorRegistry, name: str, buckets: tuple[float, ...]) -> Histogram:
    m = declared(name, "histogram")
    return Histogram(m.name, m.help, m.labels, buckets=buckets, registry=registry)


def gauge_family(name: str) -> GaugeMetricFamily:
    """A family a collector fills in at scrape time."""
    m = declared(name, "gauge")
    return GaugeMetricFamily(m.name, m.help, labels=list(m.labels))


def counter_family(name: str) -> CounterMetricFamily:
    m = declared(name, "counter")
    return CounterMetricFamily(m.name, m.help, labels=list(m.labels))


def histogram_family(name: str) -> HistogramMetricFamily:
    m = declared(name, "histogram")
    return HistogramMetricFamily(m.name, m.help, labels=list(m.labels))

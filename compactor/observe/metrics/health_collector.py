"""Each table's status word and health score as metrics, from the running job's state at scrape
time; and the time each table has spent in each state (counted between scrapes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from compactor.errors import Rejected
from compactor.observe.metrics.declared import counter_family, gauge_family
from compactor.observe.status.table_health import TableFacts, TableHealth, assess
from compactor.stream.job_view import JobView
from compactor.stream.runner import quarantine_error


def live_facts(job: JobView, table: str) -> TableFacts:
    """What the job knows of the table now: its switch, quarantine, merges running and waiting,
    its debt (what the rules would merge now), the rows other writers deleted."""
    catalog = job.catalog
    try:
        settings = job.configs.for_table(table)
        purge, objective = settings.purge_deleted_ratio, settings.max_debt
    except Rejected:
        purge, objective = None, None
    segments = catalog.segments(table)
    running, waiting = job.control.activity(table)
    debt = job.control.debt(table)
    note = catalog.quarantined(table)
    stored = sum(max(0, s.records) + s.deleted for s in segments)
    return TableFacts(
        merging_enabled=catalog.merging_enabled(table),
        quarantine=quarantine_text(note) if note is not None else None,
        running=running,
        waiting=waiting,
        awaiting_segments=debt.segments,
        awaiting_bytes=debt.bytes,
        total_bytes=sum(s.bytes for s in segments),
        hidden_rows=sum(s.deleted for s in segments),
        stored_rows=stored,
        purge_ratio=purge,
        oldest_wait=job.clock() - debt.oldest_loaded_at if debt.oldest_loaded_at else None,
        objective=objective,
    )


def quarantine_text(note: str) -> str:
    return quarantine_error(note)[0]


class HealthCollector(Collector):
    """`compactor_table_health`, `compactor_table_state` and `compactor_table_state_seconds`."""

    def __init__(self, job: JobView, clock: Callable[[], float] = time.monotonic) -> None:
        self.job = job
        self.clock = clock
        self._seen: dict[str, tuple[str, float]] = {}  # table -> (its state, when last seen)
        self._seconds: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def healths(self) -> dict[str, TableHealth]:
        found = {}
        for _ in range(10):  # the batch thread may change the catalog while it is read
            try:
                found = {t: assess(live_facts(self.job, t)) for t in list(self.job.catalog.table_names)}
                break
            except RuntimeError:
                time.sleep(0.01)
        return found

    def collect(self) -> Iterator[Metric]:
        healths = self.healths()
        now = self.clock()
        with self._lock:
            for table, health in healths.items():
                previous = self._seen.get(table)
                if previous is not None:
                    key = (table, previous[0])
                    self._seconds[key] = self._seconds.get(key, 0.0) + now - previous[1]
                self._seen[table] = (health.state, now)
            seconds = dict(self._seconds)
        score = gauge_family("compactor_table_health")
        word = gauge_family("compactor_table_state")
        for table, health in sorted(healths.items()):
            score.add_metric([table], health.score)
            word.add_metric([table, health.state], 1.0)
        spent = counter_family("compactor_table_state_seconds")
        for (table, state), total in sorted(seconds.items()):
            spent.add_metric([table, state], total)
        yield score
        yield word
        yield spent

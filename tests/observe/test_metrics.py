"""The job's metrics move as the stream works; the probes answer over HTTP."""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from dataclasses import replace
from types import SimpleNamespace

import pytest

from compactor.delta.rewrite.merge import phases
from compactor.observe.metrics.job_metrics import SIZE_BUCKETS, JobMetrics, size_buckets
from compactor.observe.metrics.readiness import lag_of, offsets_behind
from compactor.observe.metrics.server import ProbeServer
from compactor.stream.debt_trend import ingest_hours
from compactor.stream.reporting import BATCH_PHASES
from tests.helpers.harness import Harness

MINOR = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}


def value(harness_metrics: object, name: str, **labels: str) -> float | None:
    registry = harness_metrics.registry  # type: ignore[attr-defined]
    found: float | None = registry.get_sample_value(name, labels)
    return found


def test_merges_dead_letters_and_debt_are_counted(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    metrics = handler.metrics
    a, b = harness.day(0), harness.day(1)
    handler.process(harness.loaded(a, b))
    # two of three: nothing to merge yet, two segments tracked, no debt
    assert value(metrics, "compactor_segments", table="t", level="0", state="ONLINE") == 2
    assert value(metrics, "compactor_merge_candidates", table="t") == 0
    assert value(metrics, "compactor_merge_efficiency", table="t") == 1.0

    handler.process([*harness.loaded(harness.day(2)), harness.envelope(b"not an event")])
    assert value(metrics, "compactor_events_total") == 4
    assert value(metrics, "compactor_merges_completed_total", table="t", rule="minor") == 1
    assert value(metrics, "compactor_merge_rows_total", table="t", direction="in") == 3 * a.records
    assert value(metrics, "compactor_dead_letters_total", reason="undecodable") == 1
    assert value(metrics, "compactor_merge_duration_seconds_count", table="t", rule="minor") == 1
    # what Hydrolix's merge troubleshooting looks at first: the merge's write apart from its commit, the catalog's latency, sizes
    assert value(metrics, "compactor_merge_write_seconds_sum", table="t") == 0.002
    assert value(metrics, "compactor_merge_commit_seconds_sum", table="t") == 0.001
    assert value(metrics, "compactor_catalog_seconds_count", operation="load") == 1
    assert value(metrics, "compactor_catalog_seconds_count", operation="save") == 1 + 2  # start-up, batches
    (merged,) = handler.catalog.segments("t")
    assert value(metrics, "compactor_segment_size_bytes_count", table="t") == 1
    assert value(metrics, "compactor_segment_size_bytes_sum", table="t") == merged.bytes
    assert value(metrics, "compactor_active_merges") == 0
    # the plan committed: no debt left, and the one segment is the ideal count
    assert value(metrics, "compactor_debt_segments", table="t") == 0
    assert value(metrics, "compactor_ideal_segments", table="t") == 1
    assert value(metrics, "compactor_actual_segments", table="t") == 1
    # each batch's time by phase: two batches, three attempts (one per load), one commit
    counts = {p: value(metrics, "compactor_batch_phase_seconds_count", phase=p) for p in BATCH_PHASES}
    assert counts == {
        "collect": None, "decode": 2, "rows_present": 2, "plan": 3, "commit": 1, "publish": 3, "catalog": 2
    }  # fmt: skip


def test_conflicts_lost_and_failures_by_status(harness: Harness) -> None:
    harness.store.create("t")
    handler = harness.handler(MINOR)
    harness.store.always_conflicting = True
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    metrics = handler.metrics
    assert value(metrics, "compactor_conflicts_lost_total", table="t") == 4
    assert value(metrics, "compactor_merges_failed_total", table="t", rule="minor", reason="failed") == 1
    # the failed plan is still debt: 3 segments where 1 would do
    assert value(metrics, "compactor_debt_segments", table="t") == 3
    assert value(metrics, "compactor_debt_level_segments", table="t", level="0") == 3
    assert value(metrics, "compactor_debt_level_bytes", table="t", level="0") == value(
        metrics, "compactor_debt_bytes", table="t"
    )
    assert value(metrics, "compactor_merge_candidates", table="t") == 1
    assert value(metrics, "compactor_ideal_segments", table="t") == 1
    assert value(metrics, "compactor_merge_efficiency", table="t") == 1 / 3
    assert value(metrics, "compactor_debt_oldest_age_seconds", table="t") > 0


def test_debt_in_hours_of_ingest() -> None:
    assert ingest_hours(0, 0.0) == 0.0
    assert ingest_hours(3600, 1800.0) == 2.0
    assert math.isinf(ingest_hours(10, 0.0))


def test_lag_sums_every_partition_behind_the_latest_offset() -> None:
    end = '{"segments":{"0":10,"1":5}}'
    latest = '{"segments":{"0":12,"1":5,"2":3}}'
    assert offsets_behind(end, latest) == 2 + 0 + 3, "a partition the query has not read: from its start"
    assert offsets_behind('{"a":{"0":1},"b":{"0":4}}', '{"a":{"0":3},"b":{"0":4}}') == 2, "every topic"


@pytest.mark.parametrize(
    ("end", "latest"),
    [
        (None, '{"segments":{"0":3}}'),  # no batch since the start
        ("", '{"segments":{"0":3}}'),  # the empty string Spark gave right after a restart
        ("null", '{"segments":{"0":3}}'),
        ('{"segments":{"0":3}}', None),  # no latest offset fetched yet
        ('{"segments":{"0":3}}', ""),
        ('{"segments":{"0":3}}', "{}"),
        ('{"segments":{"0":3}', '{"segments":{"0":3}}'),  # cut short
        ("5", "7"),  # another source's shape
        ('{"segments":{"0":"x"}}', '{"segments":{"0":3}}'),
    ],
)
def test_a_lag_that_cannot_be_told_is_unknown_never_zero(end: str | None, latest: str | None) -> None:
    assert offsets_behind(end, latest) is None


def test_a_querys_lag_is_unknown_when_any_of_its_sources_is() -> None:
    known = SimpleNamespace(endOffset='{"s":{"0":1}}', latestOffset='{"s":{"0":4}}')
    unknown = SimpleNamespace(endOffset="", latestOffset='{"s":{"0":4}}')
    assert lag_of([known, known]) == 6
    assert lag_of([known, unknown]) is None and lag_of([]) is None


def test_an_unknown_lag_shows_as_nan_not_as_a_stale_figure(harness: Harness) -> None:
    handler = harness.handler(MINOR)
    metrics = JobMetrics()
    metrics.watch(handler.view())
    handler.control.on_lag(5)
    handler.control.on_lag(None)  # the next progress could not tell
    assert math.isnan(metrics.registry.get_sample_value("compactor_consumer_lag_events") or 0.0)
    handler.control.on_lag(12)
    assert metrics.registry.get_sample_value("compactor_consumer_lag_events") == 12


def test_the_commit_cache_s_size_is_read_at_each_scrape(harness: Harness) -> None:
    held = [0]
    metrics = JobMetrics()
    metrics.watch(replace(harness.handler(MINOR).view(), kept_commit_bytes=lambda: held[0]))
    assert metrics.registry.get_sample_value("compactor_commit_cache_bytes") == 0
    held[0] = 3 << 20
    assert metrics.registry.get_sample_value("compactor_commit_cache_bytes") == 3 << 20


def test_probes_answer_health_readiness_and_metrics(harness: Harness) -> None:
    handler = harness.handler(MINOR)
    problems: dict[str, str | None] = {"catalog": "loading"}
    server = ProbeServer(handler.metrics.registry, {"catalog": lambda: problems["catalog"]}, "127.0.0.1", 0)
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert urllib.request.urlopen(base + "/healthz").read() == b"ok\n"
        try:
            urllib.request.urlopen(base + "/ready")
            raise AssertionError("ready while the catalog loads")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503 and exc.read() == b"not ready: catalog: loading\n"
        problems["catalog"] = None
        assert urllib.request.urlopen(base + "/ready").read() == b"ready\n"
        text = urllib.request.urlopen(base + "/metrics").read().decode()
        assert "# TYPE compactor_merges_completed_total counter" in text
    finally:
        server.stop()


def test_clients_that_connect_and_send_nothing_hold_no_worker_and_the_port_closes_on_stop(
    harness: Harness,
) -> None:
    """Slowloris: more silent connections than the server has workers. wsgiref's threading server
    gave each a thread of the driver; waitress reads requests asynchronously and hands a worker
    only whole ones, so no thread is added and the probes still answer at once."""
    import socket
    import threading
    import time

    from compactor.observe.metrics.server import THREADS

    server = ProbeServer(harness.handler(MINOR).metrics.registry, {}, "127.0.0.1", 0).start()
    urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5).read()  # workers up
    threads = threading.active_count()
    silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(THREADS * 4)]
    for connection in silent:
        connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
    time.sleep(0.5)
    try:
        assert threading.active_count() == threads, "no thread per connection"
        began = time.monotonic()
        assert urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5).read() == b"ok\n"
        assert time.monotonic() - began < 2
    finally:
        for connection in silent:
            connection.close()
        server.stop()
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        raise AssertionError("the port still answers after stop()")
    except OSError:
        pass


def test_a_connection_idle_past_the_timeout_is_closed_by_the_server(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import time

    from compactor.observe.metrics import server as probes

    monkeypatch.setattr(probes, "CHANNEL_TIMEOUT_S", 1)
    server = ProbeServer(harness.handler(MINOR).metrics.registry, {}, "127.0.0.1", 0).start()
    try:
        silent = socket.create_connection(("127.0.0.1", server.port))
        silent.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finished
        silent.settimeout(10)
        began = time.monotonic()
        assert silent.recv(1024) == b"", "closed by the server, nothing answered"
        assert 1 <= time.monotonic() - began < 8
        silent.close()
    finally:
        server.stop()


def test_connections_past_the_limit_wait_until_one_closes(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from compactor.observe.metrics import server as probes

    # waitress counts its own listening socket and its wake-up pipe among the connections
    monkeypatch.setattr(probes, "CONNECTION_LIMIT", 2 + 2)
    server = ProbeServer(harness.handler(MINOR).metrics.registry, {}, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{server.port}/healthz"
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    try:
        with pytest.raises(OSError):  # accepted by the kernel, never read by the server
            urllib.request.urlopen(url, timeout=2).read()
        held.pop().close()
        assert urllib.request.urlopen(url, timeout=5).read() == b"ok\n"
    finally:
        for connection in held:
            connection.close()
        server.stop()


def test_the_metrics_port_binds_the_loopback_address_unless_told() -> None:
    from compactor.cli.run import run

    (host,) = [p for p in run.params if p.name == "metrics_host"]
    assert host.default == "127.0.0.1"


def test_the_grafana_dashboard_plots_only_metrics_the_job_exports(harness: Harness) -> None:
    import json
    import re
    from pathlib import Path

    from prometheus_client import generate_latest

    harness.store.create("t")
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    handler.metrics.on_vacuum("t")
    handler.control.on_lag(0)
    text = generate_latest(handler.metrics.registry).decode()
    declared = set(
        re.findall(r"^# HELP (compactor_\w+)", text, re.M)
    )  # labelled families without samples too
    exported = (
        declared | {f"{name}_bucket" for name in declared} | set(re.findall(r"^(compactor_\w+)", text, re.M))
    )
    # the job's lease and driver are served beside the shards' metrics (observe.shard_metrics)
    from compactor.kafka.lease import ControllerLease
    from compactor.kafka.settings import KafkaSettings
    from compactor.observe.metrics.shard_metrics import driver_memory_families, lease_families

    lease = ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh")
    exported |= {
        sample.name
        for family in [*lease_families(lease), *driver_memory_families()]
        for sample in family.samples
    }
    dashboard = json.loads((Path(__file__).parents[2] / "ops" / "grafana-dashboard.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for t in panel["targets"]
        for name in re.findall(r"compactor_\w+", t["expr"])
    }
    assert used and used <= exported, sorted(used - exported)


def test_every_metric_the_job_exports_is_declared_once_with_its_help_and_labels(harness: Harness) -> None:
    """`observe/metrics/declared.py` is the one list the docs' metrics page is generated from: the
    job exports exactly what it declares, with the declared help and labels (and a shard's)."""
    from compactor.kafka.lease import ControllerLease
    from compactor.kafka.settings import KafkaSettings
    from compactor.observe.metrics.declared import METRICS, declared
    from compactor.observe.metrics.shard_metrics import driver_memory_families, lease_families

    harness.store.create("t")
    handler = harness.handler(MINOR)
    handler.process(harness.loaded(harness.day(0), harness.day(1), harness.day(2)))
    lease = ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh")
    families = [*handler.metrics.registry.collect(), *lease_families(lease), *driver_memory_families()]
    assert sorted((f.name, f.type) for f in families) == sorted((m.name, m.kind) for m in METRICS)
    for family in families:
        spec = declared(family.name, family.type)  # type: ignore[arg-type]
        assert family.documentation == spec.help
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(spec.labels), (family.name, sample.labels)


def test_segment_sizes_fall_into_cumulative_buckets() -> None:
    mib = 2**20
    buckets, total = size_buckets([512, mib, mib + 1, 5 * mib, 2**33])
    assert dict(buckets) == {
        str(float(mib)): 2.0, str(float(4 * mib)): 3.0, str(float(16 * mib)): 4.0, str(float(64 * mib)): 4.0,
        str(float(256 * mib)): 4.0, str(float(1024 * mib)): 4.0, str(float(4096 * mib)): 4.0, "+Inf": 5.0,
    }  # fmt: skip
    assert total == 512 + mib + mib + 1 + 5 * mib + 2**33
    assert size_buckets([]) == ([*((str(e), 0.0) for e in SIZE_BUCKETS), ("+Inf", 0.0)], 0.0)


def test_a_writes_phases_come_from_the_commits_timestamp_or_not_at_all() -> None:
    assert phases(100.0, 100_250, 100.4) == (250, 150)
    assert phases(100.0, None, 100.4) == (None, None), "no timestamp"
    assert phases(100.0, 99_000, 100.4) == (None, None), "a clock that disagrees is not guessed from"

"""The benchmarks' library (bench/harness): how it reads the job's /metrics, its batches' phases, and
what the job announced against what it committed."""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench import bench_module

job_process = bench_module("harness.job_process")
restart = bench_module("harness.restart")
results = bench_module("harness.results")

METRICS = """\
# HELP compactor_active_merges Merges running now.
# TYPE compactor_active_merges gauge
compactor_active_merges{shard="0"} 1.0
compactor_consumer_lag_events 0.0
compactor_batch_phase_seconds_sum{phase="plan"} 0.25
compactor_batch_phase_seconds_sum{phase="run"} 1.5
compactor_batch_duration_seconds_sum{shard="0"} 2.0
compactor_batch_duration_seconds_sum{shard="1"} 0.5
compactor_checkpoints_total{table="a"} 2.0
compactor_checkpoints_total{table="b"} 3.0
compactor_checkpoints_total_created{table="a"} 1.7e9
not a sample
"""


def test_metrics_are_read_by_name_and_labels_with_comments_and_junk_left_out() -> None:
    found = job_process.parse_metrics(METRICS)
    assert found['compactor_active_merges{shard="0"}'] == 1.0
    assert found["compactor_consumer_lag_events"] == 0.0
    assert not any(k.startswith("#") or k.startswith("not") for k in found)
    assert len(found) == 9


def test_the_phases_of_the_batches_come_from_their_sums() -> None:
    phases = restart.batch_phases(job_process.parse_metrics(METRICS))
    assert phases == {"plan": 0.25, "run": 1.5, "batch": 2.5}


class _Metrics(http.server.BaseHTTPRequestHandler):
    body = METRICS

    def do_GET(self) -> None:
        data = self.body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_a_metric_is_summed_over_its_labels_and_never_mistaken_for_a_longer_name(
    served: int, tmp_path: Path
) -> None:
    job = job_process.JobProcess([], tmp_path / "job.log")
    job.port = served
    assert job.samples("compactor_checkpoints_total") == {'{table="a"}': 2.0, '{table="b"}': 3.0}
    assert job.metric("compactor_checkpoints_total") == 5.0
    assert job.metric("compactor_no_such_metric") == 0
    assert not job.idle(), "a merge is running"
    _Metrics.body = METRICS.replace(
        'compactor_active_merges{shard="0"} 1.0', 'compactor_active_merges{shard="0"} 0'
    )
    try:
        assert job.idle()
    finally:
        _Metrics.body = METRICS


def test_a_job_that_does_not_answer_is_not_idle(tmp_path: Path) -> None:
    job = job_process.JobProcess([], tmp_path / "job.log")
    job.port = job_process.free_port()
    assert job.metrics() == {} and not job.idle()


def test_the_query_runs_from_the_latest_start_until_it_fails_or_is_lost(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    job = job_process.JobProcess([], log)
    log.write_text(f"{job_process.START_BANNER} 1 =====\n{job_process.RUNNING} 1)\n")
    assert job_process.query_runs(job.this_start())
    log.write_text(log.read_text() + f"{job_process.START_BANNER} 2 =====\nspark: master local[2]\n")
    assert not job_process.query_runs(job.this_start()), "the earlier start's line counts no more"
    log.write_text(log.read_text() + f"{job_process.RUNNING} 2)\n")
    assert job_process.query_runs(job.this_start())
    log.write_text(log.read_text() + "lost shard(s) [0]; rejoining\n")
    assert not job_process.query_runs(job.this_start())
    log.write_text(log.read_text() + f"{job_process.RUNNING} 3)\n")
    assert job_process.query_runs(job.this_start()), "rejoined"
    assert not job.serving(), "no process: never serving"


def result(plan: str, status: str) -> dict[str, str]:
    return {"plan_id": plan, "status": status, "table": "t"}


def test_every_outcome_is_checked_given_once_and_every_success_committed_once() -> None:
    raw = [
        result("p1", "FAILED"),
        result("p1", "SUCCEEDED"),
        result("p2", "SUCCEEDED"),
        result("p2", "SUCCEEDED"),
    ]
    given = [("p1", "FAILED", "t"), ("p1", "SUCCEEDED", "t"), ("p2", "SUCCEEDED", "t")]
    found = results.results_check(given, raw, Counter({"p1": 1, "p2": 1}))
    assert (found["results_sent"], found["outcomes"], found["given_twice"], found["never_given"]) == (
        4,
        3,
        0,
        0,
    )
    assert found["succeeded_without_commit"] == found["commits_without_success"] == 0

    wrong = results.results_check(given[:2] + given[1:2], raw, Counter({"p1": 2, "p3": 1}))
    assert wrong["given_twice"] == 1 and wrong["never_given"] == 1  # p1 SUCCEEDED twice, p2 never
    assert wrong["plans_committed_twice"] == 1
    assert wrong["examples"] == {"succeeded_without_commit": ["p2"], "committed_without_success": ["p3"]}

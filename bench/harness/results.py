"""What the job announced, as a consumer of its results topic sees it: a `ResultsFollower` taking every
result (restarted when a scenario restarts the consumer), the topic's raw records, the merge commits
in the tables' histories, and the check that every outcome was given once and every success
committed once."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactor.kafka.settings import KafkaSettings


class FollowedResults(threading.Thread):
    """A `ResultsFollower` taking every result, as a consumer of the results topic does; `restart`
    closes it and opens another in the same group (a consumer restarted beside the job)."""

    def __init__(self, kafka: KafkaSettings, healthy: Callable[[str], bool] = lambda table: True) -> None:
        super().__init__(name="results-follower", daemon=True)
        self.kafka, self.healthy = kafka, healthy
        self.group = f"bench-follower-{uuid.uuid4().hex[:8]}"
        self.given: list[tuple[str, str, str]] = []  # (plan id, status, table), as given out
        self.restarts = 0
        self.success_times: list[float] = []  # monotonic seconds of each SUCCEEDED result given out
        self._succeeded = 0
        self._healthy: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._restart = threading.Event()

    def successes(self) -> int:
        """SUCCEEDED results given out so far (merges)."""
        with self._lock:
            return self._succeeded

    def healthy_successes(self) -> int:
        """SUCCEEDED plans given out of the tables `healthy` names."""
        with self._lock:
            return len(self._healthy)

    def outcomes(self) -> int:
        with self._lock:
            return len(self.given)

    def restart(self) -> None:
        self._restart.set()

    def catch_up(self, raw: list[dict[str, Any]], timeout_s: float) -> bool:
        """Wait until every (plan, status) among `raw` (the topic read to its end) was given out:
        a follower rejoining its group on a slow broker may be seconds behind when the job stops,
        and closing it then would count the results it had yet to take as never given."""
        wanted = {(str(r["plan_id"]), status_of(r)) for r in raw}
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                missing = wanted - {(p, s) for p, s, _ in self.given}
            if not missing:
                return True
            if time.monotonic() >= deadline or not self.is_alive():
                return False
            time.sleep(0.5)

    def run(self) -> None:
        from compactor.client.results import ResultsFollower

        while not self._stopping.is_set():
            try:
                topic = self.kafka.results_topic
                with ResultsFollower(
                    self.group, self.kafka.bootstrap_servers, results_topic=topic
                ) as follower:
                    while not (self._stopping.is_set() or self._restart.is_set()):
                        for result in follower.follow(idle_timeout=1.0):
                            self._take(result)
                            if self._restart.is_set():
                                break
            except Exception as exc:  # the broker paused under it: a new follower in the same group
                print(f"  results follower: {type(exc).__name__}: {str(exc)[:160]}; a new one", flush=True)
                self._stopping.wait(1.0)
            if not self._stopping.is_set():
                self._restart.clear()
                self.restarts += 1

    def _take(self, result: dict[str, Any]) -> None:
        status = status_of(result)
        with self._lock:
            self.given.append((str(result["plan_id"]), status, str(result["table"])))
            if status == "SUCCEEDED":
                self._succeeded += 1
                self.success_times.append(time.monotonic())
                if self.healthy(str(result["table"])):
                    self._healthy.add(str(result["plan_id"]))

    def close(self) -> None:
        self._stopping.set()
        self.join(timeout=60)


def status_of(result: dict[str, Any]) -> str:
    return str(getattr(result["status"], "value", result["status"]))


def raw_results(kafka: KafkaSettings) -> list[dict[str, Any]]:
    """Every record of the results topic, decoded, as the job sent it (repeats included)."""
    from confluent_kafka import Consumer

    from compactor.codec.events import default_codec
    from compactor.kafka.polling import messages

    settings = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": f"bench-raw-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumer = Consumer(settings)
    consumer.subscribe([kafka.results_topic])
    codec = default_codec()
    try:
        return [codec.decode_merge_result(m.value()) for m in messages(consumer, idle_timeout=10.0)]
    finally:
        consumer.close()


def merge_commits(uris: Iterable[str], storage_options: dict[str, str] | None = None) -> Counter[str]:
    """Plan id -> the merge commits naming it, over the history of every table (delta-rs URIs)."""
    from deltalake import DeltaTable

    from compactor.delta.log.commit_metadata import parse_metadata

    found: Counter[str] = Counter()
    for uri in uris:
        with contextlib.suppress(Exception):  # a table never loaded
            for commit in DeltaTable(uri, storage_options=storage_options).history():
                meta = parse_metadata(commit.get("userMetadata"))
                if meta and meta.get("op") == "merge" and meta.get("plan_id"):
                    found[str(meta["plan_id"])] += 1
    return found


def results_check(
    given: list[tuple[str, str, str]], raw: list[dict[str, Any]], commits: Counter[str]
) -> dict[str, Any]:
    """Each (plan, status) the job sent given to the follower exactly once; each SUCCEEDED plan
    committed exactly once, and each merge commit announced as SUCCEEDED."""
    outcomes = {(str(r["plan_id"]), status_of(r)) for r in raw}
    handed = Counter((p, s) for p, s, _ in given)
    succeeded = {p for p, s in outcomes if s == "SUCCEEDED"}
    return {
        "results_sent": len(raw),
        "outcomes": len(outcomes),
        "by_status": dict(Counter(s for _, s in outcomes)),
        "given_to_follower": sum(handed.values()),
        "given_twice": sum(c - 1 for c in handed.values()),
        "never_given": len(outcomes - set(handed)),
        "succeeded_plans": len(succeeded),
        "succeeded_without_commit": len(succeeded - set(commits)),
        "commits_without_success": len(set(commits) - succeeded),
        "plans_committed_twice": sum(1 for c in commits.values() if c > 1),
        "examples": {
            "succeeded_without_commit": sorted(succeeded - set(commits))[:5],
            "committed_without_success": sorted(set(commits) - succeeded)[:5],
        },
    }

"""The lease's story kept in the warehouse for `compactor status` (file-system stand-in, no JVM)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from compactor.job.lease_log import LeaseLog, lease_lines, read_lease_logs
from compactor.kafka.lease import ControllerLease
from compactor.kafka.settings import KafkaSettings
from tests.helpers.memory_store import InMemoryFiles


def test_each_lost_session_and_rejoin_is_written_and_read_back_as_status_says_it() -> None:
    files: Any = InMemoryFiles()
    lease = ControllerLease(KafkaSettings("127.0.0.1:1", segments_topic="s"), "/wh", instance_id="job-a")
    LeaseLog(files, "/wh", lease)
    lease._assigned(None, [TopicPartition("s.controller", 0)])
    assert read_lease_logs(files, "/wh") == [] and lease_lines([]) == [], "nothing happened yet"
    lease._lost(None, [TopicPartition("s.controller", 0)])
    (record,) = read_lease_logs(files, "/wh")
    assert record["member"] == "job-a" and [n["kind"] for n in record["notes"]] == ["lost"]
    assert lease_lines([record])[1].endswith(
        "1 lost session(s) recorded; lost at " + lines_at(record) + ": the group session was lost; rejoining"
    )
    lease._assigned(None, [TopicPartition("s.controller", 0)])
    (record,) = read_lease_logs(files, "/wh")
    assert [n["kind"] for n in record["notes"]] == ["lost", "rejoined"]
    assert "1 lost session(s) recorded; rejoined at" in lease_lines([record])[1]
    assert list(files.texts) == ["/wh/_compactor/leases/job-a.json"]


def lines_at(record: dict[str, Any]) -> str:
    from compactor.job.lease_log import _at

    return _at(record["notes"][-1]["at"])

"""The consumer side on a real Kafka broker: the results follower and `compactor events tail`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compactor import ResultsFollower
from compactor.cli.main import main
from compactor.codec.events import default_codec
from compactor.domain.events import MergeResult, MergeStatus, SegmentCompleted
from compactor.domain.plans import Commit, make_plan
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics
from tests.helpers.segments import seg
from tests.helpers.streaming import make_kafka

pytestmark = pytest.mark.integration

AT = datetime(2024, 6, 1, tzinfo=UTC)


def result(n: int) -> bytes:
    """The encoded result of plan number `n` (a merge of two days of table t)."""
    inputs = [seg(f"a{n}", "2024-01-01", records=5), seg(f"b{n}", "2024-01-02", records=5)]
    plan = make_plan("t", "minor", inputs)
    commit = Commit(10 + n, (plan.output,), 10, 100)
    return default_codec().encode_merge_result(MergeResult.succeeded(plan, commit, AT))


def send(kafka: KafkaSettings, topic: str, values: list[bytes]) -> None:
    producer = EventProducer(kafka)
    producer.send_all([(topic, "t", v, None) for v in values])
    producer.close()


def follow(
    kafka: KafkaSettings, group: str, stop_after: int | None = None, statuses: bool = False
) -> list[Any]:
    """The plan ids a follower in `group` hands out (`statuses`: with their status); with
    `stop_after`, it stops after handling that many (the `with` block ends normally)."""
    seen: list[Any] = []
    with ResultsFollower(group, kafka.bootstrap_servers, results_topic=kafka.results_topic) as results:
        for r in results.follow(idle_timeout=5):
            seen.append((r["plan_id"], r["status"]) if statuses else r["plan_id"])
            if len(seen) == stop_after:
                break
    return seen


def test_the_follower_gives_each_merge_once_and_resumes_after_what_it_handled(
    kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    ids = [
        make_plan("t", "minor", [seg(f"a{n}", "2024-01-01"), seg(f"b{n}", "2024-01-02")]).plan_id
        for n in range(5)
    ]
    # a job that restarted sends results 0 and 1 again, with the same plan ids
    send(kafka, kafka.results_topic, [result(0), result(1), result(0), result(1), result(2)])
    assert follow(kafka, "cache") == ids[:3], "each merge once across the job's restart"
    send(kafka, kafka.results_topic, [result(3), result(4)])
    assert follow(kafka, "cache", stop_after=1) == ids[3:4]
    assert follow(kafka, "cache") == ids[4:], "the restarted consumer resumes after result 3"
    assert follow(kafka, "other-group") == ids, "a new group starts at the beginning"

    with (
        pytest.raises(RuntimeError),
        ResultsFollower("failing", kafka.bootstrap_servers, results_topic=kafka.results_topic) as results,
    ):
        for _ in results.follow(idle_timeout=5):
            raise RuntimeError("handling the result failed")
    assert follow(kafka, "failing") == ids, "a result whose handling raised is given out again"


def test_a_restarted_follower_hands_out_a_plan_sent_again_after_it_only_once(
    kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    """The job re-sends result 0 after the follower handled it and stopped: the restarted follower
    reads back what its group handled before its committed offset and drops the copy."""
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    ids = [
        make_plan("t", "minor", [seg(f"a{n}", "2024-01-01"), seg(f"b{n}", "2024-01-02")]).plan_id
        for n in range(3)
    ]
    send(kafka, kafka.results_topic, [result(0), result(1)])
    assert follow(kafka, "cache") == ids[:2]
    send(kafka, kafka.results_topic, [result(0), result(2)])  # a copy of 0, from a restarted job
    assert follow(kafka, "cache") == ids[2:], "the copy of plan 0 is recognised across the restart"


def test_a_plan_retried_after_a_failure_gets_its_success_given_out_across_a_restart(
    kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    """A retried plan keeps its id: its SUCCEEDED result after the FAILED one the group already
    handled is no repeat, whether the follower reads it back or remembers it."""
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    plan = make_plan("t", "minor", [seg("a0", "2024-01-01"), seg("b0", "2024-01-02")])
    failed = default_codec().encode_merge_result(
        MergeResult.unsuccessful(plan, MergeStatus.FAILED, "the commit failed", AT)
    )
    send(kafka, kafka.results_topic, [failed])
    assert follow(kafka, "cache") == [plan.plan_id]
    send(kafka, kafka.results_topic, [failed, result(0), result(0)])  # a copy, the retry's success, a copy
    assert follow(kafka, "cache", statuses=True) == [(plan.plan_id, MergeStatus.SUCCEEDED)]
    assert follow(kafka, "other", statuses=True) == [
        (plan.plan_id, MergeStatus.FAILED),
        (plan.plan_id, MergeStatus.SUCCEEDED),
    ], "each outcome once, in one run"


def test_events_tail_decodes_each_topic_and_reports_a_bad_record_in_one_line(
    kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    ensure_topics(kafka, kafka.topics)
    codec = default_codec()
    loaded = codec.encode_segment_completed(
        SegmentCompleted(seg("d1", "2024-01-01", records=3, bytes=30), AT)
    )
    other = codec.encode_segment_completed(SegmentCompleted(seg("x1", "2024-01-01", table="u"), AT))
    send(kafka, kafka.segments_topic, [loaded, b"not an event", other])
    send(kafka, kafka.results_topic, [result(0)])

    config = tmp_path / "tables.yaml"  # the topics by the config's names
    config.write_text(json.dumps({"kafka": {"topics": {"segments": kafka.segments_topic,
                                                       "results": kafka.results_topic}}}))  # fmt: skip

    def tail(topic: str, *extra: str) -> list[str]:
        args = ["events", "tail", "--topic", topic, "--from-beginning", "--idle-timeout", "5",
                "--bootstrap-servers", kafka.bootstrap_servers, "--config", str(config), *extra]  # fmt: skip
        done = CliRunner().invoke(main, args)
        assert done.exit_code == 0, done.output
        return done.output.splitlines()

    # every event was keyed by "t": one partition, whichever it is; what follows is the offset
    lines = [line.split("/", 1)[1] for line in tail("segments")]
    assert lines[0] == (
        "0 SegmentCompleted table=t segment_id=d1 start=2024-01-01T00:00:00+00:00 "
        "end=2024-01-02T00:00:00+00:00 records=3 bytes=30 origin=load action=CREATE"
    )
    assert lines[1].startswith("1 cannot decode: ") and len(lines) == 3, lines
    assert lines[2].startswith("2 SegmentCompleted table=u segment_id=x1 ")
    assert [line.split("/", 1)[1] for line in tail("segments", "--table", "u")] == [lines[2]]
    (doc,) = [json.loads(line) for line in tail("results", "--json")]
    assert doc["offset"].endswith("/0")
    assert (doc["event"], doc["status"], doc["inputs"]) == ("MergeResult", "SUCCEEDED", ["a0", "b0"])

"""Reading a table's results back from a real broker: what a restart finds already announced."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from compactor.codec.events import default_codec
from compactor.domain.events import MergeResult, MergeStatus
from compactor.domain.plans import Commit, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.kafka.producer import EventProducer
from compactor.kafka.results_log import results_on_topic
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import ensure_topics

pytestmark = pytest.mark.integration

DAY = datetime(2024, 1, 1, tzinfo=UTC)


def result(table: str, n: int) -> tuple[str, MergeResult]:
    inputs = [
        Segment(
            f"{table}-{n}-{i}", table, TimeRange(DAY + timedelta(days=i), DAY + timedelta(days=i + 1)), DAY, 1
        )
        for i in range(2)
    ]
    plan = make_plan(table, "minor", inputs, output_level=1)
    return plan.plan_id, MergeResult.succeeded(plan, Commit(n, (plan.output,), 2, 2), DAY, False)


def test_a_tables_results_are_found_by_plan_among_other_tables(
    kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"), results_topic=unique("results"))
    ensure_topics(kafka, [kafka.results_topic], partitions=3)
    codec = default_codec()
    sent = {(table, n): result(table, n) for table in ("a", "b", "c", "d") for n in range(3)}
    producer = EventProducer(kafka)  # keyed by table, Kafka's partitioner: as the announcer sends them
    producer.send_all(
        [(kafka.results_topic, t, codec.encode_merge_result(r), None) for (t, _), (_, r) in sent.items()]
    )
    producer.close()
    ids = {key: plan_id for key, (plan_id, _) in sent.items()}
    unknown = result("a", 99)[0]
    asked = [ids["a", 0], ids["a", 2], ids["b", 1], unknown]  # b's plan is not a's, whatever the partition
    assert results_on_topic(kafka, codec, "a", asked) == {ids["a", 0], ids["a", 2]}
    assert results_on_topic(kafka, codec, "a", asked, depth=1) <= {ids["a", 2]}, "only the newest record read"
    assert results_on_topic(kafka, codec, "b", []) == set()
    empty = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"), results_topic=unique("quiet"))
    ensure_topics(empty, [empty.results_topic], partitions=2)
    assert results_on_topic(empty, codec, "a", [ids["a", 0]]) == set(), "nothing announced yet"


def test_a_plan_whose_only_result_is_a_failure_is_not_announced_yet(
    kafka_bootstrap: str, unique: Callable[[str], str]
) -> None:
    """A plan that failed, was retried (same plan id) and committed, then the job crashed before
    announcing: its FAILED result must not stand for the SUCCEEDED one the restart owes."""
    kafka = KafkaSettings(kafka_bootstrap, segments_topic=unique("segments"), results_topic=unique("results"))
    ensure_topics(kafka, [kafka.results_topic], partitions=1)
    codec = default_codec()
    (retried, succeeded), (announced, done) = result("a", 0), result("a", 1)
    failed = MergeResult.unsuccessful(succeeded.plan, MergeStatus.FAILED, "the commit failed", DAY)
    producer = EventProducer(kafka)
    producer.send_all(
        [(kafka.results_topic, "a", codec.encode_merge_result(r), None) for r in (failed, done)]
    )
    producer.close()
    assert results_on_topic(kafka, codec, "a", [retried, announced]) == {announced}

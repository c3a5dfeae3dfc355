"""What the results topic already holds of a table's merges: read back before a restart announces
again what a crashed job may have announced already, and by the results follower, which gives out
each plan's outcome once. A plan tried again after a FAILED or SKIPPED result keeps its plan id, so
what is read back is each result's (plan id, status).

Results are keyed by table, so a table's results are in one partition (Kafka's murmur2 of its
name). Only that partition's newest `depth` records are read; a result older than that, or a
broker that does not answer, makes the caller announce again (results stay at least once).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Collection

from confluent_kafka import Consumer, KafkaException, TopicPartition

from compactor.codec.events import Codec
from compactor.domain.events import MergeStatus
from compactor.errors import CompactorError
from compactor.kafka.partitioning import partition_of
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.topics import partition_count

log = logging.getLogger(__name__)

DEPTH = 10_000  # records of the table's partition read back
TIMEOUT_S = 30.0


def results_on_topic(
    settings: KafkaSettings, codec: Codec, table: str, plan_ids: Collection[str], depth: int = DEPTH
) -> set[str]:
    """Which of `plan_ids` have a SUCCEEDED MergeResult among the newest `depth` records of the
    table's partition of the results topic (empty when it cannot be told): a committed plan whose
    earlier try failed has only that FAILED result there until its success is announced."""
    if not plan_ids:
        return set()
    try:
        return _read_back(settings, codec, table, set(plan_ids), depth)
    except (KafkaException, CompactorError) as exc:
        log.warning("table %s: could not read the results topic back (%s); announcing again", table, exc)
        return set()


def _read_back(settings: KafkaSettings, codec: Codec, table: str, wanted: set[str], depth: int) -> set[str]:
    topic = settings.results_topic
    partition = partition_of(table, partition_count(settings, topic, timeout=TIMEOUT_S))
    outcomes = outcomes_before(settings, codec, partition, None, depth, key=table)
    return {plan_id for plan_id, status in outcomes if status is MergeStatus.SUCCEEDED} & wanted


def outcomes_before(
    settings: KafkaSettings,
    codec: Codec,
    partition: int,
    end: int | None,
    depth: int = DEPTH,
    key: str | None = None,
) -> set[tuple[str, MergeStatus]]:
    """The (plan id, status) of each result among the `depth` records of a partition of the results
    topic before offset `end` (None: its end), those keyed `key` only when given."""
    topic = settings.results_topic
    consumer = Consumer(
        settings.librdkafka(
            **{"group.id": f"compactor-readback-{uuid.uuid4().hex}", "enable.auto.commit": False}
        )
    )
    found: set[tuple[str, MergeStatus]] = set()
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
        stop = high if end is None or end < 0 else min(end, high)
        if stop <= low:
            return found
        consumer.assign([TopicPartition(topic, partition, max(low, stop - depth))])
        while True:
            message = consumer.poll(TIMEOUT_S)
            if message is None:
                raise CompactorError(f"no record of {topic}/{partition} in {TIMEOUT_S:.0f}s")
            if message.error() is None and (key is None or message.key() == key.encode()):
                with contextlib.suppress(CompactorError):  # not a result we can read: not one of ours
                    result = codec.decode_merge_result(message.value() or b"")
                    found.add((str(result["plan_id"]), MergeStatus(result["status"])))
            if message.error() is None and (message.offset() or 0) >= stop - 1:
                return found
    finally:
        consumer.close()

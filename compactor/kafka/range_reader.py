"""Read given offset ranges of a topic with the driver's own Kafka client.

A micro-batch's records through Spark cost a job of executor tasks; the driver can fetch the same
ranges itself (`spark.batch_offsets` finds them in the batch's plan). The consumer joins no group
and commits nothing: it is assigned the ranges' partitions at their first offsets for each read,
and keeps what falls inside them. Records are read as Spark's source reads them (uncommitted
transactional records included, unless the Spark source was told otherwise), in partition order,
then offset order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from compactor.domain.offsets import OffsetRange
from compactor.errors import RangeNotRead
from compactor.kafka.failures import kafka_reason
from compactor.kafka.settings import KafkaSettings

READ_TIMEOUT_S = 5.0
POLL_S = 0.05
MESSAGES_PER_POLL = 500


class KafkaRecord(NamedTuple):
    """One record, with the fields Spark's Kafka source gives a row of the same name."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int


class RangeReader:
    """One consumer for the life of the job; `read` is called from one thread at a time (the
    micro-batch's)."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._closed = False
        self._known: set[str] = set()  # topics whose metadata the consumer holds
        isolation = kafka.spark_options().get("kafka.isolation.level", "read_uncommitted")
        self._consumer = Consumer(
            kafka.librdkafka(
                **{
                    "group.id": "compactor-batch-reads",  # never joined: partitions are assigned
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "error",  # a range gone from the log is Spark's to judge
                    "isolation.level": isolation,
                    "fetch.wait.max.ms": 10,  # the ranges' records are there: no long poll
                    "enable.partition.eof": True,  # the end tells a range ending in markers read
                }
            )
        )

    def read(self, ranges: Sequence[OffsetRange]) -> list[KafkaRecord]:
        """Every record in `ranges`; raises `RangeNotRead` when the client reports an error or
        the ranges are not read within the timeout."""
        wanted = sorted(r for r in ranges if r.end > r.start)
        if not wanted:
            return []
        ends = {(r.topic, r.partition): r.end for r in wanted}
        if len(ends) < len(wanted):
            raise RangeNotRead(f"two ranges of one partition: {wanted}")
        found: dict[tuple[str, int], list[KafkaRecord]] = {key: [] for key in ends}
        left = {(r.topic, r.partition): r.start for r in wanted}  # partition -> next offset to read
        deadline = time.monotonic() + self.timeout_s
        try:
            self._learn({r.topic for r in wanted}, deadline)
            self._consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in wanted])
            while left:
                if time.monotonic() > deadline:
                    raise RangeNotRead(f"{sorted(left)} not read to their ends within {self.timeout_s:g} s")
                # consume() waits out its timeout unless the count it asks for arrives: ask for
                # what the ranges still hold (offsets with no record end it by the timeout)
                due = sum(ends[key] - at for key, at in left.items())
                for message in self._consumer.consume(max(1, min(due, MESSAGES_PER_POLL)), POLL_S):
                    key = (message.topic() or "", message.partition() or 0)
                    offset = message.offset() or 0
                    error = message.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        raise RangeNotRead(f"{key[0]}/{key[1]}: {error}")
                    if key not in left:
                        continue  # a partition read to its end already
                    if error is None and offset < ends[key]:
                        found[key].append(KafkaRecord(message.key(), message.value(), key[0], key[1], offset))
                        left[key] = offset + 1
                    # Done once what comes next is past the range: offsets with no record to
                    # give (a transaction's marker, a record compaction removed) end it by a later
                    # record or by the partition's end (an end event's offset comes next).
                    coming = offset + 1 if error is None else offset
                    if coming >= ends[key]:
                        del left[key]
        except KafkaException as exc:
            raise RangeNotRead(kafka_reason(exc)) from None
        finally:
            self._consumer.unassign()
        return [record for r in wanted for record in found[(r.topic, r.partition)]]

    def _learn(self, topics: Iterable[str], deadline: float) -> None:
        """Fetch the metadata of topics this consumer has not read yet. Assigned a partition of a
        topic it knows nothing of, librdkafka fetches nothing until its periodic scan of unknown
        topics asks the broker (up to a second later; 0.66 s median here): a started job's first
        micro-batch paid that. A topic the broker does not have is refused here, by name."""
        for topic in sorted(set(topics) - self._known):
            timeout = max(0.1, deadline - time.monotonic())
            found = self._consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if found is None or found.error is not None:
                raise RangeNotRead(f"topic {topic!r}: {found.error if found else 'not in the metadata'}")
            self._known.add(topic)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._consumer.close()

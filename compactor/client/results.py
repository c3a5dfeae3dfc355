"""`ResultsFollower`: the merge results, decoded, each plan's outcome once, for one consumer group.

The job announces a result at least once: a job that restarts may send a
result again, with the same `plan_id`. A plan tried again after it failed or
was skipped keeps its `plan_id` too, so one plan may end in a FAILED (or
SKIPPED) result and then a SUCCEEDED one. The follower drops a result whose
`plan_id` and `status` it has already given out (it remembers the last `window`
of them): each outcome once, the success after a failure always. It commits a
result's offset only once the caller asks for the next one, so a consumer that
stops mid-way resumes after the last result it finished with. A follower that
starts again (or is given a partition another member had) first reads back the
`window` records before the group's committed offset of each partition it is
given, so a copy the job sent after one the group already handled is dropped
across the restart too.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Unpack

from confluent_kafka import Consumer, KafkaException, TopicPartition

from compactor.client.connection import Connection, KafkaOptions
from compactor.domain.events import MergeStatus
from compactor.errors import CompactorError
from compactor.kafka.polling import messages
from compactor.kafka.results_log import outcomes_before

log = logging.getLogger(__name__)

DEDUPE_WINDOW = 100_000  # (plan id, status) pairs remembered; a repeat older than this is given out again
READ_BACK_TIMEOUT_S = 30.0


class ResultsFollower:
    """Iterate the results topic as a consumer group member:

    ```python
    with ResultsFollower("segment-cache", bootstrap_servers="kafka:9092") as results:
        for result in results.follow():
            handle(result)  # committed when the loop asks for the next one, or the block ends
    ```

    Each result is a dict: `plan_id`, `table`, `rule`, `inputs`, `output`, `outputs`, `status`
    (a `MergeStatus`), counts and times (the fields of `schemas/merge_result.avsc`).
    A new group starts at the topic's beginning (`from_beginning=False`: at its end). Kafka
    settings as for `SparkLoader` (`results_topic` names the topic).
    """

    def __init__(
        self,
        group_id: str,
        bootstrap_servers: str | None = None,
        *,
        from_beginning: bool = True,
        window: int = DEDUPE_WINDOW,
        **kafka: Unpack[KafkaOptions],
    ) -> None:
        if not group_id:
            raise CompactorError("group_id: a consumer group is needed to remember what was processed")
        self.connection = Connection.of(bootstrap_servers, **kafka)
        results_topic = self.connection.kafka.results_topic
        self.window = window
        self._seen: OrderedDict[tuple[str, MergeStatus], None] = OrderedDict()
        self._given: Any = None  # the last message given out, committed once the caller moves on
        settings = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
        }
        self._consumer = Consumer(self.connection.kafka.librdkafka(**settings))
        self._consumer.subscribe([results_topic], on_assign=self._assigned)

    def _assigned(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Remember the outcomes the group already handled on the partitions given to it."""
        try:
            committed = consumer.committed(partitions, timeout=READ_BACK_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("results: could not read the committed offsets back (%s); repeats may pass", exc)
            return
        for position in committed:
            if position.offset is None or position.offset <= 0:
                continue  # nothing handled there yet
            try:
                seen = outcomes_before(
                    self.connection.kafka,
                    self.connection.codec,
                    position.partition,
                    position.offset,
                    self.window,
                )
            except (KafkaException, CompactorError) as exc:
                log.warning(
                    "results partition %d: not read back (%s); repeats may pass", position.partition, exc
                )
                continue
            for outcome in seen:
                self._remember(outcome)

    def follow(self, idle_timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Each new result, once per `plan_id` and `status` (a plan that failed and then
        succeeded on a retry is given out twice: FAILED, then SUCCEEDED); ends when nothing
        arrived for `idle_timeout` seconds (None: never). A result's offset is committed when
        the next one is asked for, or when the follower closes after the caller handled it (the
        `with` block ends without an exception); a result whose handling raised is given out
        again after a restart."""
        for message in messages(self._consumer, idle_timeout):
            self._commit()  # the caller asked for more: it is done with the last one
            self._given = message
            result = self._decode(message)
            if result is not None:
                yield result
        self._commit()

    def _decode(self, message: Any) -> dict[str, Any] | None:
        """The result, or None for a repeat or a record that is not a result (logged)."""
        try:
            result = self.connection.codec.decode_merge_result(message.value())
        except CompactorError as exc:
            log.warning(
                "results topic partition %d offset %d: not a merge result (%s); skipped",
                message.partition(),
                message.offset(),
                exc,
            )
            return None
        outcome = (str(result["plan_id"]), MergeStatus(result["status"]))
        if outcome in self._seen:
            self._seen.move_to_end(outcome)
            return None
        self._remember(outcome)
        return result

    def _remember(self, outcome: tuple[str, MergeStatus]) -> None:
        self._seen[outcome] = None
        if len(self._seen) > self.window:
            self._seen.popitem(last=False)

    def _commit(self) -> None:
        message, self._given = self._given, None
        if message is not None:
            position = TopicPartition(message.topic(), message.partition(), message.offset() + 1)
            self._consumer.commit(offsets=[position], asynchronous=False)

    def close(self, processed: bool = True) -> None:
        """Leave the group; `processed`: the last result given out was handled (commit it)."""
        if processed:
            self._commit()
        self._consumer.close()

    def __enter__(self) -> ResultsFollower:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.close(processed=kind is None)  # an exception while handling it: it comes again

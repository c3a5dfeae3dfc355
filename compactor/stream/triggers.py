"""What the stream acts on: messages as they arrived, the work they trigger, and refusals."""

from __future__ import annotations

from dataclasses import dataclass

from compactor.errors import DeadLetterReason


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message of the segments topic, as it arrived."""

    key: str
    value: bytes
    source: str  # topic/partition/offset, for the operator reading a dead letter


@dataclass(frozen=True, slots=True)
class Trigger:
    """One attempt to make for a table: after an event, an operator's request, or a re-plan.

    With `only_rule` that rule runs whatever its trigger; with `merge_ids` a
    manual merge of exactly those segments is validated and run; with
    `delete_value` that sub-partition value's rows are deleted first; with `merging` the
    table's merging is switched off or on (and, on, its rules evaluated); with `cancel_plan`
    the table's merge in flight under that plan id is cancelled, and nothing else is done.
    """

    table: str
    origin: str  # load, merge, refresh, request, config or replan
    only_rule: str | None = None
    merge_ids: tuple[str, ...] = ()
    delete_value: str | None = None
    merging: bool | None = None
    cancel_plan: str | None = None
    request_id: str | None = None  # the operator's request behind it, named in what it reports
    segment_id: str | None = None  # the segment the event described: the attempt may look near it


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message refused, with why: it goes to the dead-letter topic with its original bytes."""

    envelope: Envelope
    reason: DeadLetterReason
    detail: str

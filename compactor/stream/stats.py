"""The job's counters, shared by the stream's parts (tests read them; metrics export them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HandlerStats:
    """What the job did since it started."""

    events: int = 0
    attempts: int = 0
    empty_attempts: int = 0
    merges: int = 0
    replayed_merges: int = 0
    failed_merges: int = 0
    cancelled_merges: int = 0  # merges that ran past their time bound (counted as failed too)
    dead_letters: int = 0
    redelivered_events: int = 0  # events of segments already tracked (or merged away since)
    conflicts: int = 0
    attempt_errors: int = 0
    cooled_attempts: int = 0  # attempts skipped while a table whose work failed cools down
    replans: int = 0
    due_attempts: int = 0  # tables attempted because their due time came, with no event
    disabled_attempts: int = 0  # attempts not made because an operator turned merging off
    quarantined_attempts: int = 0  # attempts not made because the table is quarantined
    purges: int = 0  # segments rewritten without the rows other writers deleted
    attempts_by_origin: dict[str, int] = field(default_factory=dict)

"""The job's counters. Each part of the stream keeps its own (the type names the owner, and only
the owner adds to it); `HandlerStats` is a reading of them all at one moment, for the summary
line, the CLI and the tests."""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class TriggerCounts:
    """The handler's: events in, and what became of the work they asked for."""

    events: int = 0
    dead_letters: int = 0
    attempt_errors: int = 0
    cooled_attempts: int = 0  # attempts skipped while a table whose work failed cools down
    due_attempts: int = 0  # tables attempted because their due time came, with no event
    disabled_attempts: int = 0  # attempts not made because an operator turned merging off
    quarantined_attempts: int = 0  # attempts not made because the table is quarantined
    paused_attempts: int = 0  # attempts put off while an outage pauses them


@dataclass
class AttemptCounts:
    """The planner's: evaluations of a table's rules."""

    attempts: int = 0
    empty_attempts: int = 0
    attempts_by_origin: dict[str, int] = field(default_factory=dict)

    def attempted(self, origin: str) -> None:
        self.attempts += 1
        self.attempts_by_origin[origin] = self.attempts_by_origin.get(origin, 0) + 1


@dataclass
class MergeCounts:
    """The runner's: what the merges did."""

    merges: int = 0
    replayed_merges: int = 0
    failed_merges: int = 0
    cancelled_merges: int = 0  # merges that ran past their time bound (counted as failed too)
    conflicts: int = 0
    replans: int = 0


@dataclass(frozen=True)
class HandlerStats:
    """What the job did since it started, read at one moment."""

    events: int = 0
    attempts: int = 0
    empty_attempts: int = 0
    merges: int = 0
    replayed_merges: int = 0
    failed_merges: int = 0
    cancelled_merges: int = 0
    dead_letters: int = 0
    redelivered_events: int = 0  # events of segments already tracked (or merged away since)
    conflicts: int = 0
    attempt_errors: int = 0
    cooled_attempts: int = 0
    replans: int = 0
    due_attempts: int = 0
    disabled_attempts: int = 0
    quarantined_attempts: int = 0
    paused_attempts: int = 0
    purges: int = 0  # segments rewritten without the rows other writers deleted
    attempts_by_origin: dict[str, int] = field(default_factory=dict)

    @classmethod
    def read(
        cls,
        triggers: TriggerCounts,
        attempts: AttemptCounts,
        merges: MergeCounts,
        redelivered: int,
        purges: int,
    ) -> HandlerStats:
        values: dict[str, object] = {}
        for counts in (triggers, attempts, merges):
            values |= {f.name: getattr(counts, f.name) for f in fields(counts)}
        values["attempts_by_origin"] = dict(attempts.attempts_by_origin)
        return cls(**values, redelivered_events=redelivered, purges=purges)  # type: ignore[arg-type]

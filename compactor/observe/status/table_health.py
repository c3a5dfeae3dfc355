"""Each table's state in one word, and a health score from 0 to 100 (pure).

An operator looking at thousands of tables wants, as Druid's console gives it, one phrase per
table (`merged`, `awaiting 12 segments (340 MiB)`, `merging`, `waiting: <why>`,
`quarantined: <error>`, `disabled`) and, as Amoro's dashboard gives it, a number to sort by,
so that the least healthy come first.

The score weighs three things, each from 0 (bad) to 1 (good):

- **layout** (40 %): the share of the table's bytes not waiting for a merge;
- **deleted rows** (30 %): how far the rows other writers deleted, which the files still
  hold, are from the purge ratio (at the ratio or above: 0);
- **debt age** (30 %): how long the oldest segment waiting for a merge has waited, against the
  table's `max_debt` objective (24 hours when it sets none).

A quarantined table scores 0: nothing will improve it until someone acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

MIB = 1024 * 1024
DEFAULT_OBJECTIVE = timedelta(hours=24)
WEIGHTS = {"layout": 0.4, "deleted": 0.3, "age": 0.3}
STATES = ("merged", "awaiting", "merging", "waiting", "quarantined", "disabled")


@dataclass(frozen=True, slots=True)
class TableHealth:
    word: str  # the state in words: `awaiting 3 segments (12 MiB)`, `quarantined: <error>`, ...
    state: str  # one of STATES: what the word starts with
    score: int  # 0..100
    parts: dict[str, float]  # layout, deleted, age: each 0..1

    def to_json(self) -> dict[str, object]:
        return {"status": self.word, "state": self.state, "health": self.score, "parts": self.parts}


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What the word and the score are made of."""

    merging_enabled: bool = True
    quarantine: str | None = None  # the last error of a quarantined table
    running: int = 0  # merges in flight
    waiting: str | None = None  # why merges ready to run have not started (None: none wait)
    awaiting_segments: int = 0  # segments the rules would merge now
    awaiting_bytes: int = 0
    total_bytes: int = 0
    hidden_rows: int = 0  # rows other writers deleted that the files still hold
    stored_rows: int = 0  # every row the files hold, visible or hidden
    purge_ratio: float | None = None
    oldest_wait: timedelta | None = None  # how long the oldest awaiting segment has waited
    objective: timedelta | None = None  # the table's max_debt


def assess(facts: TableFacts) -> TableHealth:
    """The table's word and score (see the module's text)."""
    state, word = _word(facts)
    parts = {
        "layout": 1.0 - min(1.0, facts.awaiting_bytes / facts.total_bytes) if facts.total_bytes else 1.0,
        "deleted": _deleted(facts),
        "age": _age(facts),
    }
    score = 0 if state == "quarantined" else round(100 * sum(WEIGHTS[k] * v for k, v in parts.items()))
    return TableHealth(word, state, score, {k: round(v, 3) for k, v in parts.items()})


def _word(facts: TableFacts) -> tuple[str, str]:
    if not facts.merging_enabled:
        return "disabled", "disabled"
    if facts.quarantine is not None:
        return "quarantined", f"quarantined: {facts.quarantine}"
    if facts.running:
        return "merging", "merging" if facts.running == 1 else f"merging ({facts.running} merges)"
    if facts.waiting is not None:
        return "waiting", f"waiting: {facts.waiting}"
    if facts.awaiting_segments:
        size = facts.awaiting_bytes / MIB
        return "awaiting", f"awaiting {facts.awaiting_segments} segments ({size:,.0f} MiB)"
    return "merged", "merged"


def _deleted(facts: TableFacts) -> float:
    if not facts.stored_rows or not facts.hidden_rows:
        return 1.0
    share = facts.hidden_rows / facts.stored_rows
    ratio = facts.purge_ratio or 1.0
    return max(0.0, 1.0 - share / ratio)


def _age(facts: TableFacts) -> float:
    if facts.oldest_wait is None or facts.awaiting_segments == 0:
        return 1.0
    objective = facts.objective or DEFAULT_OBJECTIVE
    return max(0.0, 1.0 - facts.oldest_wait / objective)


def least_healthy(healths: dict[str, TableHealth], top: int) -> list[tuple[str, TableHealth]]:
    """The `top` tables with the lowest scores (ties by name)."""
    return sorted(healths.items(), key=lambda item: (item[1].score, item[0]))[:top]

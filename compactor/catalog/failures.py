"""Failed plans and tables, kept with the table's mark: status shows them, a restart keeps them
cooling down (a plan that fails on every start would otherwise be retried on every start)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from compactor.domain.segments import utc

KEPT = 5  # per table, newest first
DETAIL_CHARS = 300


@dataclass(frozen=True, slots=True)
class Failure:
    key: str  # a plan id, or `table:<name>` for a table whose work failed
    rule: str | None
    reason: str
    at: datetime
    until: datetime  # left alone until then
    streak: int = 0  # the table's failures in a row with this one: kept, so a restart counts on
    # not a failure yet: a merge began. Still there at the next start, the job died during it (a
    # crash, out of memory): then it counts, so a merge that kills the job ends in quarantine.
    running: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "rule": self.rule,
            "reason": self.reason[:DETAIL_CHARS],
            "at": self.at.isoformat(),
            "until": self.until.isoformat(),
            **({"streak": self.streak} if self.streak else {}),
            **({"running": True} if self.running else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Failure:
        return cls(
            d["key"],
            d.get("rule"),
            d["reason"],
            utc(datetime.fromisoformat(d["at"])),
            utc(datetime.fromisoformat(d["until"])),
            int(d.get("streak", 0)),
            bool(d.get("running", False)),
        )


BEGUN = "#begun"  # a merge begun is kept under its plan's key with this after it


def begun_key(key: str) -> str:
    return key + BEGUN


def noted(failures: tuple[Failure, ...], failure: Failure) -> tuple[Failure, ...]:
    """`failure` first, then the older ones of other keys, at most KEPT (a failure replaces the
    mark of its merge begun)."""
    replaced = {failure.key, begun_key(failure.key)}
    return (failure, *(f for f in failures if f.key not in replaced))[:KEPT]

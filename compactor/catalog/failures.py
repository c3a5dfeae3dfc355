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

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "rule": self.rule,
            "reason": self.reason[:DETAIL_CHARS],
            "at": self.at.isoformat(),
            "until": self.until.isoformat(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Failure:
        return cls(
            d["key"],
            d.get("rule"),
            d["reason"],
            utc(datetime.fromisoformat(d["at"])),
            utc(datetime.fromisoformat(d["until"])),
        )


def noted(failures: tuple[Failure, ...], failure: Failure) -> tuple[Failure, ...]:
    """`failure` first, then the older ones of other keys, at most KEPT."""
    return (failure, *(f for f in failures if f.key != failure.key))[:KEPT]

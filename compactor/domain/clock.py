"""The wall clock, in one place, so that everything else can take `now` as an argument."""

from __future__ import annotations

from datetime import UTC, datetime


def now_utc() -> datetime:
    return datetime.now(UTC)

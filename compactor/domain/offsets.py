"""A span of a topic partition's offsets: what a micro-batch reads of the segments topic."""

from __future__ import annotations

from typing import NamedTuple


class OffsetRange(NamedTuple):
    """Offsets `start` (inclusive) to `end` (exclusive) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

"""Producer advice: when a table's unmerged small loads pile up past a ceiling, tell its producers
how large (or how far apart) loads should be. Pure; the announcer publishes it."""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta

from compactor.domain.columns import SegmentColumns
from compactor.domain.events import ProducerAdvice

ADVISE_EVERY = timedelta(hours=1)  # per table


def advise(
    table: str,
    segments: SegmentColumns,
    ceiling: int,
    min_bytes: int,
    loads_per_hour: float,
    now: datetime,
) -> ProducerAdvice | None:
    """Advice when more than `ceiling` loads smaller than `min_bytes` wait unmerged."""
    small = segments.size[segments.as_loaded & (segments.size < min_bytes)]
    if len(small) <= ceiling:
        return None
    median = int(statistics.median(small.tolist()))
    interval = None
    if loads_per_hour > 0:  # loads this size this often; as often as it takes to reach min_bytes
        interval = round(3600 / loads_per_hour * min_bytes / max(median, 1))
    reason = (
        f"{len(small)} loads smaller than {min_bytes} bytes wait unmerged (ceiling {ceiling}); "
        f"their median is {median} bytes: load at least {min_bytes} bytes at a time"
        + (f", or about every {interval} s" if interval is not None else "")
    )
    return ProducerAdvice(table, reason, len(small), ceiling, median, min_bytes, interval, now)

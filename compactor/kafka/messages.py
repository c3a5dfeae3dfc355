"""The shape of what we produce: (topic, key, value, headers), and the headers of dead letters."""

from __future__ import annotations

from collections.abc import Sequence

Message = tuple[str, str, bytes, Sequence[tuple[str, bytes]] | None]

DEAD_LETTER_REASON_HEADER = "compactor.dead_letter.reason"
DEAD_LETTER_DETAIL_HEADER = "compactor.dead_letter.detail"
DEAD_LETTER_SOURCE_HEADER = "compactor.source"

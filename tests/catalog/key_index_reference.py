"""The key index as it was before it went compact (a dict per key hash, about 250 bytes a key):
kept only as the reference model the compact `catalog.key_index.KeyIndex` is tested against."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from compactor.catalog.key_index import KeyRow
from compactor.domain.layout import refresh_output_prefix
from compactor.domain.plans import output_id
from compactor.domain.segments import Segment


class _Holder:
    """A segment's share of winners; once merged away, it points at the segment that replaced it."""

    __slots__ = ("loaded", "parent", "segment_id", "wins")

    def __init__(self, segment_id: str, loaded: datetime | None) -> None:
        self.segment_id = segment_id
        self.loaded = loaded
        self.wins = 0
        self.parent: _Holder | None = None

    def root(self) -> _Holder:
        top = self
        while top.parent is not None:
            top = top.parent
        node = self
        while node.parent is not None and node.parent is not top:  # shorten the path for next time
            node.parent, node = top, node.parent
        return top


class ReferenceKeyIndex:
    """One table's winners; see the module."""

    def __init__(self) -> None:
        self._winners: dict[int, tuple[bool, Any, int, _Holder]] = {}
        self._holders: dict[str, _Holder] = {}  # live segments the index has read or followed
        self._shapes: dict[str, _Shape] = {}  # what they held when the index took them in
        self._touched: set[str] = set()  # segments whose count may have changed since `take_touched`

    def __len__(self) -> int:
        return len(self._winners)

    def follow(
        self,
        live: Mapping[str, Segment],
        retired_by: Callable[[str], str | None],
        changed: Iterable[str] | None = None,
    ) -> list[str] | None:
        """Move to the table's live segments; return the new loads whose rows `absorb` needs,
        or None when the change cannot be followed and the index must be rebuilt. `changed`:
        the ids set or removed since the last call, when the caller knows (None: compare all)."""
        if changed is None:
            looked, new = self._shapes.keys() & live.keys(), live.keys() - self._holders.keys()
            gone = list(self._holders.keys() - live.keys())
        else:
            ids = set(changed)
            looked = {sid for sid in ids if sid in live and sid in self._shapes}
            new = {sid for sid in ids if sid in live and sid not in self._holders}
            gone = [sid for sid in ids if sid in self._holders and sid not in live]
        if any(_shape(live[sid]) != self._shapes[sid] for sid in looked):
            return None  # rows deleted or rewritten in place: a key's winner may have gone with them
        made = _outputs_by_plan(new)
        targets: dict[str, _Holder] = {}
        while gone:
            sid = gone.pop()
            plan = retired_by(sid)
            out = None if plan is None else _output_of(plan, made)
            if out is None:
                return None  # removed by another writer, or split: nothing says where its keys went
            holder, target = self._holders.pop(sid), self._holders.get(out) or targets.get(out)
            if target is None:
                target = targets[out] = _Holder(out, None)
                if out not in live:
                    self._holders[out] = target  # merged away again since: follow it further
                    gone.append(out)
            holder.parent, target.wins = target, target.wins + holder.wins
            holder.wins = 0
            self._shapes.pop(sid, None)
        for out, target in targets.items():
            if out in live:
                target.loaded = live[out].loaded_at
                self._holders[out], self._shapes[out] = target, _shape(live[out])
                self._touched.add(out)
        return sorted(new - self._holders.keys())

    def absorb(self, loads: Iterable[Segment], rows: Iterable[KeyRow]) -> None:
        """Take in new segments and their rows (each row is compared with its key's winner)."""
        holders: dict[str, _Holder] = {}
        for segment in loads:
            holders[segment.id] = self._holders[segment.id] = _Holder(segment.id, segment.loaded_at)
            self._shapes[segment.id] = _shape(segment)
            self._touched.add(segment.id)
        winners = self._winners
        for key, value, row_hash, segment_id in rows:
            holder = holders.get(segment_id)
            if holder is None:
                continue  # a segment the catalog does not know (yet): its event decides
            present = value is not None
            current = winners.get(key)
            if current is not None:
                held = current[3].root()
                if (present, value, holder.loaded, row_hash) <= (
                    current[0],
                    current[1],
                    held.loaded,
                    current[2],
                ):
                    continue
                held.wins -= 1
                self._touched.add(held.segment_id)
            winners[key] = (present, value, row_hash, holder)
            holder.wins += 1

    def invalid(self) -> dict[str, int]:
        """Invalid (superseded) rows per segment the index holds; segments without any left out."""
        counts = {sid: self._count(sid) for sid in self._holders}
        return {sid: n for sid, n in counts.items() if n > 0}

    def take_touched(self) -> dict[str, int]:
        """The invalid rows of each segment whose count may have changed since the last call."""
        touched = {sid: self._count(sid) for sid in self._touched if sid in self._holders}
        self._touched.clear()
        return touched

    def _count(self, segment_id: str) -> int:
        # below 0 only for a moment: a merge followed before the load that its read already saw
        return max(self._shapes[segment_id][0] - self._holders[segment_id].wins, 0)


_Shape = tuple[int, frozenset[str], tuple[tuple[str, str], ...]]


def _shape(segment: Segment) -> _Shape:
    """What a segment holds as far as its rows go: a change means rows changed in place."""
    return segment.records, segment.sub_partitions, segment.sub_partition_states


def _outputs_by_plan(new: Iterable[str]) -> dict[str, list[str]]:
    """New segments by the prefix their plan gave their id (merges: the whole id)."""
    refreshed, merged = refresh_output_prefix(""), output_id("")
    made: dict[str, list[str]] = {}
    for sid in new:
        if sid.startswith(refreshed):  # the prefix and the first characters of the plan id
            made.setdefault(refresh_output_prefix(sid.removeprefix(refreshed)), []).append(sid)
        elif sid.startswith(merged):
            made.setdefault(sid, []).append(sid)
    return made


def _output_of(plan_id: str, made: Mapping[str, list[str]]) -> str | None:
    """The one live segment `plan_id` wrote; its would-be id when none is live (merged away
    again); None when it wrote several (a split: the keys' new holders are unknown)."""
    found = made.get(output_id(plan_id)) or made.get(refresh_output_prefix(plan_id)) or [output_id(plan_id)]
    return found[0] if len(found) == 1 else None

"""The catalog's durable store: where segment facts live so that they outlive the Delta log.

Delta removes commit files older than `delta.logRetentionDuration` (30 days by
default) and its checkpoints drop `commitInfo`, where each load and merge
recorded its segments. The catalog store keeps those facts for good: the live
segments (read at start-up, in time proportional to their number), what is
kept of retired ones (looked up by id), and per table the data-table version
the stored facts are complete to and the Bloom filter of retired ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from compactor.catalog.failures import Failure
from compactor.catalog.retired import RetiredFilter, RetiredSegment
from compactor.domain.segments import Segment


@dataclass(frozen=True, slots=True)
class TableMark:
    """How far the stored facts of one table go: every data-table commit up to `version` is
    folded in; `announced` is the newest version whose merge events Kafka acknowledged."""

    version: int
    announced: int | None = None
    retired: RetiredFilter = field(default_factory=RetiredFilter)
    config: str | None = None  # the table config last published for it (JSON), if any
    merging: bool = True  # False after `compactor table disable`: no new plan starts
    failures: tuple[Failure, ...] = ()  # the newest failed plans, with their cool-downs
    debt: str | None = None  # the running job's last debt outlook (JSON), for `compactor status`
    quarantine: str | None = None  # why the table is quarantined (its last error); None: it is not
    # versions of merges folded from the log and not announced yet: a restart reads them again,
    # since `version` is past them (the history of what to announce lives in memory)
    unannounced: tuple[int, ...] = ()


@dataclass
class CatalogChanges:
    """What changed since the last save: segments now live (or gone: None), segments retired,
    and the tables whose marks moved."""

    live: dict[tuple[str, str], Segment | None] = field(default_factory=dict)
    retired: list[RetiredSegment] = field(default_factory=list)
    marks: dict[str, TableMark] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.live or self.retired or self.marks)


@dataclass(frozen=True, slots=True)
class StoredCatalog:
    segments: Mapping[str, Sequence[Segment]]  # live segments per table
    marks: Mapping[str, TableMark]


@dataclass(frozen=True, slots=True)
class StoreScope:
    """The part of a warehouse's catalog that one shard's job reads and writes: the tables it
    `owns`, and a journal of its own (`name`), so that jobs sharing the warehouse never write
    the same file or fold the same rows."""

    name: str
    owns: Callable[[str], bool]


class CatalogStore(Protocol):
    def load(self) -> StoredCatalog:
        """Every table's live segments and marks (empty the first time)."""

    def save(self, changes: CatalogChanges) -> None:
        """Make the changes durable (one write; a crash before it loses none of them, since
        the data tables' own commits are folded again from the last saved mark)."""

    def retired(self, table: str, segment_ids: Sequence[str]) -> dict[str, RetiredSegment]:
        """What is kept of these ids, for those that were retired."""

    def merged_by(self, table: str, plan_ids: Sequence[str]) -> dict[str, set[str]]:
        """The ids each of these plans retired (merged away), for the plans found."""

    def upkeep(self) -> None:
        """The store's own housekeeping, off the batches' path (its files compacted, old ones
        removed), when it is due; a call that finds nothing due costs nothing."""

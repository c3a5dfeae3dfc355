"""How one table's merges and refreshes write: one value, built once per table from its config
and the job's options, handed to every commit of the table."""

from __future__ import annotations

from dataclasses import dataclass

from compactor.config.layout import LayoutConfig, UpsertConfig
from compactor.config.rules import RefreshRule
from compactor.config.sort import SortConfig
from compactor.config.tables import TableSettings
from compactor.delta.log.reader import RECENT_COMMITS
from compactor.delta.paths import TARGET_FILE_BYTES
from compactor.delta.rewrite.driver_merge import DRIVER_MERGE_MAX_BYTES
from compactor.delta.rewrite.promote import PROMOTE_MIN_FILE_BYTES
from compactor.errors import CompactorError


@dataclass(frozen=True, slots=True)
class MergeSettings:
    """What a commit of the table needs besides its plan.

    - `upsert`: the table's key and comparison columns (only valid rows are written);
    - `order`: the output's layout (sort or Z-order); `target_file_bytes`: its files' size;
    - `write_tasks`: the Spark tasks a merge writes with at most (None: one per file);
    - `promote_min_bytes`: inputs made of files this big are moved, not rewritten (None: never);
    - `driver_max_bytes`: a plain merge this small is written by the driver with Arrow;
    - `depth`: how many of the newest commits a replay's check reads before asking Delta;
    - `layout`, `refresh`, `config_version`, `sub_column`: what a refresh conforms to;
    - `certify`: a merge proves its rows unchanged before it commits (`domain/certificate.py`).
    """

    upsert: UpsertConfig | None = None
    order: SortConfig | None = None
    target_file_bytes: int = TARGET_FILE_BYTES
    write_tasks: int | None = None
    promote_min_bytes: int | None = PROMOTE_MIN_FILE_BYTES
    driver_max_bytes: int = DRIVER_MERGE_MAX_BYTES
    depth: int = RECENT_COMMITS
    layout: LayoutConfig | None = None
    refresh: RefreshRule | None = None
    config_version: int = 1
    sub_column: str | None = None
    certify: bool = True

    @classmethod
    def of(
        cls,
        settings: TableSettings,
        write_tasks: int | None = None,
        driver_max_bytes: int = DRIVER_MERGE_MAX_BYTES,
        depth: int = RECENT_COMMITS,
        certify: bool = True,
    ) -> MergeSettings:
        """A table's settings as its commits use them, with the job's own options (`certify`: the
        job-wide `certify_merges`, which the table's own setting overrides)."""
        return cls(
            upsert=settings.upsert,
            order=settings.layout_order,
            target_file_bytes=settings.target_file_size,
            write_tasks=write_tasks,
            promote_min_bytes=settings.promote_files_over,
            driver_max_bytes=driver_max_bytes,
            depth=depth,
            layout=settings.layout,
            refresh=next((r for r in settings.rules if isinstance(r, RefreshRule)), None),
            config_version=settings.config_version,
            sub_column=settings.sub_partition.column if settings.sub_partition else None,
            certify=settings.certifies(certify),
        )

    def refresh_rule(self, table: str) -> tuple[LayoutConfig, RefreshRule]:
        """The layout and refresh rule a refresh plan conforms to; an error naming the table
        when its config has either missing."""
        if self.layout is None or self.refresh is None:
            raise CompactorError(f"table {table}: a refresh plan needs the refresh rule and a layout")
        return self.layout, self.refresh

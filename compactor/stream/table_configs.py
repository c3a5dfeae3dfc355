"""Each table's effective config: the file's, or a newer one published on the topic."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from compactor.catalog.fold import SegmentCatalog
from compactor.config.loading import settings_from_json
from compactor.config.tables import ProjectConfig, TableSettings
from compactor.delta.store import TableStore
from compactor.domain.events import ConfigApplied
from compactor.errors import ConfigError, DeadLetterReason, Rejected

log = logging.getLogger(__name__)
T = TypeVar("T")


class TableConfigs:
    """The config file plus the table configs published since (`compactor config apply`).

    A published config is recorded with its table (truth lives in Delta) and in
    the catalog, from which a restart adopts it again (`load_recorded`) without
    opening every table.
    """

    def __init__(self, project: ProjectConfig, store: TableStore, catalog: SegmentCatalog) -> None:
        self.project = project
        self.store = store
        self.catalog = catalog
        self._published: dict[str, TableSettings] = {}

    def for_table(self, table: str) -> TableSettings:
        """The table's settings: a config published on the topic wins over the file's.

        Raises `Rejected(invalid_config)` when the file gives the table no valid config.
        """
        published = self._published.get(table)
        if published is not None:
            return published
        try:
            return self.project.for_table(table)
        except ConfigError as exc:
            raise Rejected(DeadLetterReason.INVALID_CONFIG, str(exc)) from None

    def setting(self, table: str, read: Callable[[TableSettings], T], fallback: T) -> T:
        """One of a table's settings, or `fallback` while the table has no valid config (for the
        work beside the merges: purges, log upkeep, which must not fail on it)."""
        try:
            return read(self.for_table(table))
        except Rejected:
            return fallback

    def load_recorded(self, catalog: SegmentCatalog, new_tables: list[str]) -> None:
        """Adopt the published configs newer than the file's: those the catalog remembers, and
        for tables new to it, those recorded with the table (where `config apply` put them)."""
        for table in catalog.table_names:
            recorded = catalog.published_config(table)
            if recorded is None and table in new_tables:
                recorded = self.store.recorded_config(table)
                if recorded:
                    catalog.record_config(table, recorded)
            if recorded:
                settings = settings_from_json(recorded, table)
                if settings.config_version > self.project.for_table(table).config_version:
                    self._published[table] = settings

    def adopt(self, event: ConfigApplied) -> TableSettings | None:
        """Adopt a published config if it is newer; None when it is not. Invalid: `Rejected`."""
        try:
            settings = settings_from_json(event.settings_json, event.table)
        except ConfigError as exc:
            raise Rejected(DeadLetterReason.INVALID_CONFIG, str(exc)) from None
        if settings.config_version != event.config_version:
            raise Rejected(
                DeadLetterReason.INVALID_CONFIG,
                f"event says version {event.config_version}, settings say {settings.config_version}",
            )
        if settings.config_version <= self.for_table(event.table).config_version:
            log.info(
                "table %s: config version %d is not newer; ignored", event.table, settings.config_version
            )
            return None
        self.store.record_config(event.table, event.settings_json)
        self.catalog.record_config(event.table, event.settings_json)
        self._published[event.table] = settings
        log.info("table %s: config version %d applied", event.table, settings.config_version)
        return settings
